"""``lightning.fabric.utilities``: the utilities (seed_everything, rank_zero_only, move_data_to_device, ...), trainmesh's (trainmesh.utilities), which Lightning's
Trainer side and Fabric share."""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    return getattr(importlib.import_module("trainmesh.utilities"), name)


def __dir__() -> list[str]:
    return dir(importlib.import_module("trainmesh.utilities"))
