"""``lightning.fabric.strategies``: the strategy classes (a DDPStrategy/FSDPStrategy object is a Fabric(strategy=...) argument), trainmesh's (trainmesh.strategies), which Lightning's
Trainer side and Fabric share."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def __getattr__(name: str) -> Any:
    package = importlib.import_module("trainmesh.strategies")
    try:
        return getattr(package, name)
    except AttributeError:  # a submodule not imported yet (``types``, ``fsdp``)
        if importlib.util.find_spec(f"trainmesh.strategies.{name}") is None:
            raise
        return importlib.import_module(f"trainmesh.strategies.{name}")


def __dir__() -> list[str]:
    return dir(importlib.import_module("trainmesh.strategies"))
