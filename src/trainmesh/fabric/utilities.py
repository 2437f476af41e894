"""``lightning.fabric.utilities``: the utilities (seed_everything, rank_zero_only, move_data_to_device, ...), trainmesh's (trainmesh.utilities), which Lightning's
Trainer side and Fabric share."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def __getattr__(name: str) -> Any:
    package = importlib.import_module("trainmesh.utilities")
    try:
        return getattr(package, name)
    except AttributeError:  # a submodule not imported yet (``types``, ``fsdp``)
        if importlib.util.find_spec(f"trainmesh.utilities.{name}") is None:
            raise
        return importlib.import_module(f"trainmesh.utilities.{name}")


def __dir__() -> list[str]:
    return dir(importlib.import_module("trainmesh.utilities"))
