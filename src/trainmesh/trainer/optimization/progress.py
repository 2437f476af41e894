"""The count of optimizer steps, which ``trainer.global_step`` is: the one place it grows.

Lightning reads ``global_step`` from its optimizer loop's progress; here the automatic step's owner
(owner.py), Lightning 1.x's runners (through that owner) and manual optimization's ``opt.step()``
count through ``count_optimizer_steps``. Otherwise only a restore (a checkpoint's, a peer's, a
worker's outcome) sets ``global_step``; ``tests/test_architecture.py`` checks it.
"""

from __future__ import annotations

from typing import Protocol


class _EpochSteps(Protocol):
    epoch_steps: int  # the optimizer steps of the epoch (loop_progress.LoopCounters: Lightning's step.current)


class CountsSteps(Protocol):
    """What holds the count (loop_state.LoopState; manual optimization's view of it)."""

    global_step: int

    @property
    def progress(self) -> _EpochSteps: ...  # (read-only here: LoopState's is a LoopCounters)


def count_optimizer_steps(state: CountsSteps, count: int = 1) -> None:
    """``count`` optimizer steps done (1.x's turns: one per active optimizer)."""
    state.global_step += count
    state.progress.epoch_steps += count
