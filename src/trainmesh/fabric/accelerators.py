"""``lightning.fabric.accelerators``: the accelerator classes, trainmesh's (trainmesh.accelerators), which Lightning's
Trainer side and Fabric share."""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    return getattr(importlib.import_module("trainmesh.accelerators"), name)


def __dir__() -> list[str]:
    return dir(importlib.import_module("trainmesh.accelerators"))
