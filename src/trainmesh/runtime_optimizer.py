"""The optimizer a Runtime hands back from ``setup``: its ``step`` goes through the run's precision."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch


class _StepsOptimizers(Protocol):
    """The Runtime, as its optimizers see it (named by what they call, so no import cycle)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any: ...


class RuntimeOptimizer:
    """An optimizer whose ``step()`` goes through the precision's loss scaler.

    Every other attribute (``param_groups``, ``zero_grad``, ``state_dict``) is the wrapped
    optimizer's own.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, runtime: _StepsOptimizers) -> None:
        self.optimizer = optimizer
        self._runtime = runtime

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        return self._runtime.optimizer_step(self.optimizer, closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"RuntimeOptimizer({self.optimizer!r})"
