"""How worker processes start. A launcher never knows what a strategy does with them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainmesh.launchers.base import Launcher, ProcessInfo
from trainmesh.launchers.in_process import InProcessLauncher
from trainmesh.utilities.lazy import lazy_attribute, lazy_dir

if TYPE_CHECKING:  # imported on first use: a run in one process never starts the agent nor spawns
    from trainmesh.launchers.elastic import ElasticLauncher
    from trainmesh.launchers.spawn import SpawnLauncher

_LAZY = {"ElasticLauncher": "elastic", "SpawnLauncher": "spawn"}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, globals(), _LAZY, name)


def __dir__() -> list[str]:
    return lazy_dir(globals(), _LAZY)


def build_launcher(
    start_method: str,
    *,
    devices: int,
    num_nodes: int,
    max_restarts: int = 0,
    environment: Mapping[str, str] | None = None,
) -> Any:
    """The launcher for a strategy's ``start_method``; ``max_restarts``: how many times the
    elastic agent starts the workers again after a failure; ``environment``: variables the
    workers it starts get (where not set already)."""
    _check_max_restarts(max_restarts, start_method=start_method, processes=devices * num_nodes)
    variables = dict(environment or {})
    if start_method == "in_process":
        return InProcessLauncher()
    if start_method == "elastic":
        from trainmesh.launchers.elastic import ElasticLauncher

        return ElasticLauncher(devices=devices, num_nodes=num_nodes, max_restarts=max_restarts, environment=variables)
    from trainmesh.launchers.spawn import SpawnLauncher

    return SpawnLauncher(devices=devices, num_nodes=num_nodes, start_method=start_method, environment=variables)


def _check_max_restarts(max_restarts: int, *, start_method: str, processes: int) -> None:
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts={max_restarts!r} must be an integer >= 0 (0: a failure ends the run)")
    if max_restarts == 0:
        return
    if start_method != "elastic" or processes == 1:
        why = "one process" if processes == 1 else f"start method {start_method!r}"
        raise ValueError(
            f"max_restarts={max_restarts}: restarts are made by the elastic agent that strategy='ddp' starts for "
            f"several processes, and this run has {why}, with no agent to restart it. Use strategy='ddp' with "
            "devices > 1, or start the script with torchrun --max-restarts N (--nproc-per-node 1 for one "
            "process), or set max_restarts=0"
        )


__all__ = ["ElasticLauncher", "InProcessLauncher", "Launcher", "ProcessInfo", "SpawnLauncher", "build_launcher"]
