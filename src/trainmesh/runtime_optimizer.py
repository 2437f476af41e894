"""The optimizer a Runtime hands back from ``setup``: its ``step`` goes through the run's precision."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch


class _StepsOptimizers(Protocol):
    """The run's precision, as its optimizers see it (named by what they use, so no import
    cycle): called directly rather than through ``Runtime.optimizer_step``, one call fewer a step."""

    scaler: Any  # torch.amp.GradScaler under 16-mixed; None: the optimizer's own step is the step

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any: ...


class RuntimeOptimizer:
    """An optimizer whose ``step()`` goes through the precision's loss scaler.

    Every other attribute (``param_groups``, ``zero_grad``, ``state_dict``) is the wrapped
    optimizer's own.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, precision: _StepsOptimizers) -> None:
        self.optimizer = optimizer
        self._precision = precision
        self._plain = precision.scaler is None  # no loss scaler: step() is the optimizer's own
        # The optimizer's own, bound here: the loop calls it after every step, no wrapper call between.
        self.zero_grad: Callable[..., None] = optimizer.zero_grad

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if self._plain:  # what Precision.optimizer_step does without a scaler, one call fewer per step
            return self.optimizer.step() if closure is None else self.optimizer.step(closure)
        return self._precision.optimizer_step(self.optimizer, closure)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"RuntimeOptimizer({self.optimizer!r})"


def inner_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer itself, whether or not the Runtime wrapped it."""
    return optimizer.optimizer if isinstance(optimizer, RuntimeOptimizer) else optimizer
