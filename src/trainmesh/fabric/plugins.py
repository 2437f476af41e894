"""``lightning.fabric.plugins``: the plugins (a precision plugin is a Fabric(plugins=...) argument), trainmesh's (trainmesh.plugins), which Lightning's
Trainer side and Fabric share."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def __getattr__(name: str) -> Any:
    package = importlib.import_module("trainmesh.plugins")
    try:
        return getattr(package, name)
    except AttributeError:  # a submodule not imported yet (``types``, ``fsdp``)
        if importlib.util.find_spec(f"trainmesh.plugins.{name}") is None:
            raise
        return importlib.import_module(f"trainmesh.plugins.{name}")


def __dir__() -> list[str]:
    return dir(importlib.import_module("trainmesh.plugins"))
