"""Strategy names and the one table that maps them to classes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from trainmesh.precision import Precision
from trainmesh.strategies.base import Strategy
from trainmesh.strategies.ddp import DDPStrategy
from trainmesh.strategies.dp import DataParallelStrategy
from trainmesh.strategies.fsdp import FSDPStrategy
from trainmesh.strategies.single import SingleDeviceStrategy

# name -> a constructor taking no arguments; the Runtime then binds it to devices and precision.
STRATEGIES: dict[str, Callable[[], Any]] = {
    "single": SingleDeviceStrategy,
    "ddp": DDPStrategy,
    "ddp_spawn": functools.partial(DDPStrategy, start_method="spawn"),
    "ddp_fork": functools.partial(DDPStrategy, start_method="fork"),
    "ddp2": functools.partial(DDPStrategy, ddp2=True),
    "dp": DataParallelStrategy,
    "zero1": functools.partial(DDPStrategy, shard_optimizer_state=True),
    "sharded": functools.partial(FSDPStrategy, reshard_after_forward=False),
    "fsdp": FSDPStrategy,
    "hsdp": functools.partial(FSDPStrategy, hybrid=True),
}


def build_strategy(
    strategy: str | Any,
    *,
    device_type: str,
    devices: list[int],
    num_nodes: int,
    precision: Precision,
) -> Any:
    """Turn ``Trainer(strategy=...)`` into a bound strategy; "auto" picks by process count."""
    if isinstance(strategy, str):
        name = strategy.lower()
        if name == "auto":
            name = "single" if len(devices) * num_nodes == 1 else "ddp"
        if name not in STRATEGIES:
            raise ValueError(f"strategy={strategy!r} is not known; choose one of: auto, {', '.join(sorted(STRATEGIES))}")
        strategy = STRATEGIES[name]()
    if not hasattr(strategy, "bind"):
        raise TypeError(f"strategy={strategy!r} is neither a strategy name nor a strategy object")
    return strategy.bind(device_type=device_type, devices=devices, num_nodes=num_nodes, precision=precision)


__all__ = ["STRATEGIES", "DDPStrategy", "DataParallelStrategy", "FSDPStrategy", "SingleDeviceStrategy", "Strategy", "build_strategy"]
