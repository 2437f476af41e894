"""Lightning's ``lightning.pytorch.core.optimizer`` path: ``LightningOptimizer``, the type of the
optimizers a module is handed (``self.optimizers()`` in manual optimization, ``optimizer_step``'s
``optimizer``), for the type hints and ``isinstance`` checks programs write; and ``do_nothing_closure``.

trainmesh's Trainer makes those wrappers itself (trainer/manual_optimization.py, trainer/optimization/
closure.py): each is also an instance of the user's optimizer class, as Lightning's is. Constructing a
``LightningOptimizer`` by hand is refused, saying what to use."""

from __future__ import annotations

from typing import Any

__all__ = ["LightningOptimizer", "do_nothing_closure"]

# The classes of the wrappers trainmesh hands to a module, by module and name (imported when asked:
# this path is imported by programs that may never train).
_WRAPPERS = (
    ("trainmesh.trainer.manual_optimization", "ManualOptimizer"),
    ("trainmesh.trainer.optimization.closure", "HookedOptimizer"),
)


class _WrapperType(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        import importlib

        return any(isinstance(instance, getattr(importlib.import_module(m), n)) for m, n in _WRAPPERS)


class LightningOptimizer(metaclass=_WrapperType):
    """The optimizer a module is handed: ``isinstance(opt, LightningOptimizer)`` is True for what
    ``self.optimizers()`` returns and for ``optimizer_step``'s ``optimizer``.

    Examples:
        >>> import torch
        >>> isinstance(torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1), LightningOptimizer)
        False
    """

    def __init__(self, optimizer: Any) -> None:
        raise TypeError(
            "LightningOptimizer(...) is made by the Trainer: trainmesh hands the module its optimizers already "
            "wrapped (self.optimizers(), optimizer_step's optimizer); use those"
        )


def do_nothing_closure() -> None:
    """A closure that does nothing (Lightning's default for ``optimizer.step()`` without one)."""
    return None
