"""``trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress`` as programs use it.

Lightning's ``trainer.global_step`` under manual optimization IS this counter's ``total.completed``
(``_TrainingEpochLoop.global_step``). Programs that train with optimizers of their own (meta-learning
episodes fine-tuning a copy with a local AdamW; solvers stepping outside ``self.optimizers()``) advance
it themselves so that logging cadence, checkpoint names and ``max_steps`` follow their steps:

>>> trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress.increment_completed()  # doctest: +SKIP

Here that is one more optimizer step counted where every step is counted (``count_optimizer_steps``):
``global_step`` and the epoch's step count grow as Lightning's do. ``total``/``current`` (the same: Lightning
resets neither per epoch) read (``ready``, ``completed``) as copies. Under automatic optimization Lightning's counter is one nobody
reads (``global_step`` is the automatic loop's); its increments change nothing there and here.
"""

from __future__ import annotations

from typing import Any, Protocol

from trainmesh.trainer.optimization.progress import CountsSteps, count_optimizer_steps


class ManualStepOwner(Protocol):
    """What the counter reads of the Trainer (the Trainer is one)."""

    _state: CountsSteps

    @property
    def lightning_module(self) -> Any: ...


class StepTracker:
    """Lightning's ``_ReadyCompletedTracker`` as read at one moment: ``ready``, ``completed``."""

    __slots__ = ("ready", "completed")

    def __init__(self, count: int) -> None:
        self.ready = self.completed = count  # a step in hand is counted when opt.step() ends

    def __repr__(self) -> str:
        return f"StepTracker(ready={self.ready}, completed={self.completed})"


def _manual(owner: ManualStepOwner) -> bool:
    module = owner.lightning_module
    return module is not None and not module.automatic_optimization


class OptimStepProgress:
    """Lightning's ``_ManualOptimization.optim_step_progress``: ``total``, ``current`` and its increment."""

    __slots__ = ("_owner",)

    def __init__(self, owner: ManualStepOwner) -> None:
        self._owner = owner

    @property
    def total(self) -> StepTracker:
        return StepTracker(self._owner._state.global_step if _manual(self._owner) else 0)

    @property
    def current(self) -> StepTracker:
        # Lightning never resets this one per epoch (only the automatic loop's): current is total
        return self.total

    def increment_completed(self) -> None:
        """One more step done: ``trainer.global_step`` + 1 under manual optimization, as in Lightning."""
        if _manual(self._owner):
            count_optimizer_steps(self._owner._state)


class ManualOptimizationView:
    """Lightning's ``trainer.fit_loop.epoch_loop.manual_optimization``: its ``optim_step_progress``."""

    __slots__ = ("_owner",)

    def __init__(self, owner: ManualStepOwner) -> None:
        self._owner = owner

    @property
    def optim_step_progress(self) -> OptimStepProgress:
        return OptimStepProgress(self._owner)
