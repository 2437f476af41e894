"""A training batch from its start: the batch the loader gave may be None, and
``on_train_batch_start`` may end the epoch; otherwise the batch trains.

Lightning's ``_TrainingEpochLoop.advance`` trains no batch that is None (a ``collate_fn`` that drops
a whole batch returns one): it warns once per Trainer, calls neither ``on_train_batch_start`` nor
``training_step``, steps no optimizer and counts the batch ready and processed but not started, yet
steps the step-interval schedulers due at it and calls ``on_train_batch_end`` with ``outputs=None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainmesh.strategies.step import StepResult
from trainmesh.trainer.epoch_end import end_epoch_at_batch_start
from trainmesh.trainer.optimization.automatic_optimization import AutomaticRunner
from trainmesh.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from trainmesh.trainer.hooks import TrainBatchHooks
    from trainmesh.trainer.loop_state import LoopState
    from trainmesh.trainer.optimization.runners import Runner

NONE_BATCH_WARNING = "train_dataloader yielded None. If this was on purpose, ignore this warning..."
END_OF_EPOCH = object()  # what a batch gives where on_train_batch_start returned -1


class BatchStart:
    """Called per batch: the batch's output (None for a None batch), or ``END_OF_EPOCH``."""

    def __init__(
        self,
        state: LoopState,
        batch_hooks: TrainBatchHooks,
        batches: Runner,
        run_batch: Callable[..., StepResult],
    ) -> None:
        self.state, self.batch_hooks, self.batches, self.run_batch = state, batch_hooks, batches, run_batch
        self.at_start = batch_hooks.at_start  # read once: the step's fast path makes no call where it is False
        self.progress = state.progress.train_batches  # trainer.fit_loop.epoch_loop.batch_progress

    def __call__(self, batch: Any, batch_idx: int, *, steps_now: bool) -> Any:
        if batch is None:
            self._skip(batch_idx, steps_now=steps_now)
            return None
        if self.at_start and self.batch_hooks.start(batch, batch_idx) == -1:
            end_epoch_at_batch_start(self.state, self.batch_hooks.hooks, batch_idx)
            return END_OF_EPOCH
        self.progress.started()
        return self.run_batch(batch, batch_idx, steps_now=steps_now).output

    def _skip(self, batch_idx: int, *, steps_now: bool) -> None:
        """A None batch: Lightning's warning (once per Trainer) and, in automatic optimization where
        the batch ends an accumulation window, the step-interval schedulers due at it."""
        state = self.state
        if not state.none_batch_told:
            state.none_batch_told = True
            rank_zero_warn(NONE_BATCH_WARNING)
        if steps_now and state.lr_scheduler_configs and isinstance(self.batches, AutomaticRunner):
            self.batches.steps.step_schedulers(batch_idx)
