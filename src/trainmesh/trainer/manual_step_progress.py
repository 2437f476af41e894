"""``trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress`` as programs use it.

Lightning's ``trainer.global_step`` under manual optimization IS this counter's ``total.completed``
(``_TrainingEpochLoop.global_step``). Programs that train with optimizers of their own (meta-learning
episodes fine-tuning a copy with a local AdamW; solvers stepping outside ``self.optimizers()``) advance
it themselves so that logging cadence, checkpoint names and ``max_steps`` follow their steps:

>>> trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress.increment_completed()  # doctest: +SKIP

Here that is one more optimizer step counted where every step is counted (``count_optimizer_steps``):
``global_step`` and the epoch's step count grow as Lightning's do. ``total``/``current`` read ``ready`` and ``completed``
(Lightning resets neither per epoch); ``total.completed += 1`` counts a step too (in total only, as Lightning). Under automatic optimization Lightning's counter is one nobody
reads (``global_step`` is the automatic loop's); its increments change nothing there and here.
"""

from __future__ import annotations

from typing import Any, Protocol

from trainmesh.trainer.optimization.progress import count_optimizer_steps


class _Counters(Protocol):
    epoch_steps: int  # (loop_progress.LoopCounters)
    steps_written_to_total: int


class _StepState(Protocol):
    global_step: int  # (loop_state.LoopState)

    @property
    def progress(self) -> _Counters: ...


class ManualStepOwner(Protocol):
    """What the counter reads of the Trainer (the Trainer is one)."""

    _state: _StepState

    @property
    def lightning_module(self) -> Any: ...


class StepTracker:
    """Lightning's ``_ReadyCompletedTracker`` of the step count: ``ready``, ``completed``. A program that
    writes ``total.completed`` (``+= 1`` after a step of its own, as PINA's solvers do) counts those steps."""

    __slots__ = ("_owner", "ready")

    def __init__(self, owner: ManualStepOwner, count: int) -> None:
        self._owner = owner
        self.ready = count  # a step in hand is counted when opt.step() ends: ready is completed between steps

    @property
    def completed(self) -> int:
        return self._owner._state.global_step if _manual(self._owner) else 0

    @completed.setter
    def completed(self, value: int) -> None:
        if not _manual(self._owner):
            return  # automatic optimization: Lightning's counter that nobody reads
        steps = int(value) - self._owner._state.global_step
        if steps < 0:
            raise ValueError(
                f"optim_step_progress.total.completed = {value}: trainer.global_step is "
                f"{self._owner._state.global_step}, and trainmesh counts steps forward only (a step count set back "
                "would disagree with the checkpoints and logs already written). Resume from a checkpoint instead "
                "(trainer.fit(..., ckpt_path=...))"
            )
        count_optimizer_steps(self._owner._state, steps)
        self._owner._state.progress.steps_written_to_total += steps

    def __repr__(self) -> str:
        return f"StepTracker(ready={self.ready}, completed={self.completed})"


class _CurrentTracker(StepTracker):
    """``current`` as read: its ``completed`` is the count it was made with (a write there is Lightning's
    current only, which nothing reads: kept on this copy)."""

    __slots__ = ("_completed",)

    def __init__(self, owner: ManualStepOwner, count: int) -> None:
        super().__init__(owner, count)
        self._completed = count

    @property
    def completed(self) -> int:
        return self._completed

    @completed.setter
    def completed(self, value: int) -> None:
        self._completed = int(value)


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
        return StepTracker(self._owner, self._owner._state.global_step if _manual(self._owner) else 0)

    @property
    def current(self) -> StepTracker:
        """The steps counted by ``opt.step()`` and ``increment_completed()`` (Lightning resets it at no
        epoch, unlike the automatic loop's), not those written into ``total.completed``."""
        if not _manual(self._owner):
            return StepTracker(self._owner, 0)
        state = self._owner._state
        return _CurrentTracker(self._owner, state.global_step - state.progress.steps_written_to_total)

    def increment_ready(self) -> None:
        """A step about to run: Lightning's ``ready`` count, which ``global_step`` does not read."""

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
