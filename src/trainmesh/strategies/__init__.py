"""Strategy names and the one table that maps them to classes."""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.precision import Precision
from trainmesh.strategies.base import Strategy
from trainmesh.strategies.single import SingleDeviceStrategy

# name -> class; later strategies add one line each.
STRATEGIES: dict[str, type] = {
    "single": SingleDeviceStrategy,
}


def build_strategy(
    strategy: str | Any,
    *,
    device_type: str,
    devices: list[int],
    num_nodes: int,
    precision: Precision,
) -> Any:
    """Turn ``Trainer(strategy=...)`` into a strategy object; "auto" picks by device count."""
    if not isinstance(strategy, str):
        return strategy  # an instance the user configured
    name = strategy.lower()
    if name == "auto":
        name = "single" if len(devices) * num_nodes == 1 else "ddp"
        if name not in STRATEGIES:
            raise ValueError(
                f"{len(devices)} device(s) x {num_nodes} node(s) need a multi-process strategy "
                f"('ddp'), which this build does not have yet; use devices=1, num_nodes=1"
            )
    if name not in STRATEGIES:
        available = ", ".join(sorted(STRATEGIES))
        raise ValueError(f"strategy={strategy!r} is not known; choose one of: auto, {available}")
    if name == "single":
        if len(devices) * num_nodes != 1:
            raise ValueError(
                f"strategy='single' runs on one device, but devices={devices} and num_nodes={num_nodes} "
                "ask for more; use devices=1 or a multi-device strategy"
            )
        device = torch.device("cpu") if device_type == "cpu" else torch.device(device_type, devices[0])
        return SingleDeviceStrategy(device, precision=precision)
    return STRATEGIES[name](device_type=device_type, devices=devices, num_nodes=num_nodes, precision=precision)


__all__ = ["STRATEGIES", "Strategy", "SingleDeviceStrategy", "build_strategy"]
