"""``lightning.fabric.strategies``: the strategy classes (a DDPStrategy/FSDPStrategy object is a Fabric(strategy=...) argument), trainmesh's (trainmesh.strategies), which Lightning's
Trainer side and Fabric share."""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    return getattr(importlib.import_module("trainmesh.strategies"), name)


def __dir__() -> list[str]:
    return dir(importlib.import_module("trainmesh.strategies"))
