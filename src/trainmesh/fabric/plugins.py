"""``lightning.fabric.plugins``: the plugins (a precision plugin is a Fabric(plugins=...) argument), trainmesh's (trainmesh.plugins), which Lightning's
Trainer side and Fabric share."""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    return getattr(importlib.import_module("trainmesh.plugins"), name)


def __dir__() -> list[str]:
    return dir(importlib.import_module("trainmesh.plugins"))
