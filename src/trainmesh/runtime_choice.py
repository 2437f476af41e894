"""The strategy a Runtime was asked for, and how its processes start.

``strategy="auto"`` on several processes is provisional (ddp) until the model is known: the
Trainer then has the Runtime choose by the model's memory (``runtime.trainer_port.choose_strategy``),
before any process starts, and the launcher is built again for the chosen strategy.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from trainmesh.launchers import Launcher, build_launcher
from trainmesh.model_configuration import built_for_estimate
from trainmesh.strategies import build_strategy
from trainmesh.strategies.auto import auto_strategy
from trainmesh.strategies.protocol import Placement, Strategy


class StrategyChoice:
    """``strategy`` (a name, "auto" or an instance) on ``placement``; ``reason``: why "auto" chose
    what it chose ("" until it chooses by memory)."""

    def __init__(self, strategy: str | Any, placement: Placement, *, num_nodes: int, max_restarts: int) -> None:
        self.placement, self.reason = placement, ""
        self._auto = auto_strategy(strategy)
        self._num_nodes, self._max_restarts = num_nodes, max_restarts

    def chooses_by_memory(self, world_size: int) -> bool:
        """Whether the strategy is "auto" on several processes (one process: single-device)."""
        return self._auto is not None and world_size > 1

    def choose(self, module: nn.Module, world_size: int) -> Strategy:
        """ddp, zero1, sharded or fsdp: the first whose per-rank memory estimate for ``module``
        fits a device (:attr:`reason` says which and why)."""
        assert self._auto is not None, "choose() is for strategy='auto' (chooses_by_memory)"
        estimated, on_meta = built_for_estimate(module)
        name, reason = self._auto.choose(
            estimated, world_size=world_size, placement=self.placement, built_on_meta=on_meta
        )
        chosen = build_strategy(name, self.placement)
        self.reason = reason
        return chosen

    def launcher_for(self, strategy: Strategy) -> Launcher:
        """How ``strategy``'s processes start (built again where "auto" chooses one that starts others)."""
        plan = strategy.processes
        launcher: Launcher = build_launcher(
            plan.start_method,
            devices=plan.per_node,
            num_nodes=self._num_nodes,
            max_restarts=self._max_restarts,
            environment=plan.environment,
        )
        return launcher
