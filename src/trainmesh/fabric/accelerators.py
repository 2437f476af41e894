"""``lightning.fabric.accelerators``: the accelerator classes, trainmesh's (trainmesh.accelerators), which Lightning's
Trainer side and Fabric share."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def __getattr__(name: str) -> Any:
    package = importlib.import_module("trainmesh.accelerators")
    try:
        return getattr(package, name)
    except AttributeError:  # a submodule not imported yet (``types``, ``fsdp``)
        if importlib.util.find_spec(f"trainmesh.accelerators.{name}") is None:
            raise
        return importlib.import_module(f"trainmesh.accelerators.{name}")


def __dir__() -> list[str]:
    return dir(importlib.import_module("trainmesh.accelerators"))
