"""How worker processes start. A launcher never knows what a strategy does with them."""

from __future__ import annotations

from typing import Any

from trainmesh.launchers.base import Launcher, ProcessInfo
from trainmesh.launchers.elastic import ElasticLauncher
from trainmesh.launchers.in_process import InProcessLauncher
from trainmesh.launchers.spawn import SpawnLauncher


def build_launcher(start_method: str, *, devices: int, num_nodes: int) -> Any:
    """The launcher for a strategy's ``start_method``."""
    if start_method == "in_process":
        return InProcessLauncher()
    if start_method == "elastic":
        return ElasticLauncher(devices=devices, num_nodes=num_nodes)
    return SpawnLauncher(devices=devices, num_nodes=num_nodes, start_method=start_method)


__all__ = ["ElasticLauncher", "InProcessLauncher", "Launcher", "ProcessInfo", "SpawnLauncher", "build_launcher"]
