"""The optimizer a Runtime hands back from ``setup``: its ``step`` goes through the run's precision."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, Protocol

import torch

from trainmesh.utilities.wrapped_objects import sharing_state, slot_method


class _StepsOptimizers(Protocol):
    """The run's precision, as its optimizers see it (named by what they use, so no import
    cycle): called directly rather than through ``Runtime.optimizer_step``, one call fewer a step."""

    scaler: Any  # torch.amp.GradScaler under 16-mixed; None: the optimizer's own step is the step

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any: ...


class RuntimeOptimizer:
    """An optimizer whose ``step()`` goes through the precision's loss scaler.

    It is the user's optimizer to anyone who asks, as Lightning's ``LightningOptimizer`` is: its
    class subclasses the user's (``isinstance(opt, torch.optim.Adam)`` holds) and it shares the
    user's ``__dict__`` (``param_groups``, ``state``, a custom optimizer's fields: read and written
    on the user's optimizer; utilities/wrapped_objects.py). ``zero_grad`` is the optimizer's own.
    Made by ``RuntimeOptimizer.of(optimizer, precision)``.
    """

    __slots__ = ("optimizer", "_precision", "_plain", "_tm_step", "_tm_zero_grad")
    step = slot_method("_tm_step")
    # The optimizer's own, bound: the loop calls it after every step, no wrapper call between.
    zero_grad = slot_method("_tm_zero_grad")

    optimizer: torch.optim.Optimizer
    _precision: _StepsOptimizers
    _plain: bool
    _tm_step: Callable[..., Any]
    _tm_zero_grad: Callable[..., None]

    @classmethod
    def of(cls, optimizer: torch.optim.Optimizer, precision: _StepsOptimizers) -> RuntimeOptimizer:
        made = sharing_state(cls, optimizer)
        made.optimizer = optimizer
        made._precision = precision
        made._plain = precision.scaler is None  # no loss scaler: step() is the optimizer's own
        made._tm_step = types.MethodType(cls._step, made)  # not made._step: the user's __dict__ could hide it
        made._tm_zero_grad = optimizer.zero_grad
        return made

    def _step(self, closure: Callable[[], Any] | None = None) -> Any:
        if self._plain:  # what Precision.optimizer_step does without a scaler, one call fewer per step
            # Lightning always gives step a closure (one that does nothing where there is none)
            return self.optimizer.step(closure=_do_nothing if closure is None else closure)  # type: ignore[arg-type]
        return self._precision.optimizer_step(self.optimizer, closure)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Pickled and copied as what it wraps, wrapped again (its class is made at run time: not importable)
        return (RuntimeOptimizer.of, (self.optimizer, self._precision))

    def __repr__(self) -> str:
        return f"RuntimeOptimizer({self.optimizer!r})"


def _do_nothing() -> None:
    """The closure a step without one gets, as Lightning's ``do_nothing_closure``: an optimizer
    written ``def step(self, closure)`` (Lightning's docs) steps; torch's call it and get None
    (torch types the closure as returning a float, its loss: None is what Lightning's returns)."""


def inner_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer itself, whether or not the Runtime wrapped it."""
    return optimizer.optimizer if isinstance(optimizer, RuntimeOptimizer) else optimizer
