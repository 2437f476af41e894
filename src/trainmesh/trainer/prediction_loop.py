"""What a predict run shows as ``trainer.predict_loop`` (Lightning's ``_PredictionLoop``'s
``predictions``, ``epoch_batch_indices``, ``current_batch_indices``, read by
``BasePredictionWriter``), and the batch indices it records: each predict DataLoader's batch
sampler is wrapped (as Lightning's ``_IndexBatchSamplerWrapper``) so that the dataset indices of
each batch are known; a loader with no batch sampler has none (Lightning warns and gives ``[]``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainmesh.trainer.loop_progress import Progress
from trainmesh.utilities.index_batches import IndexBatchSampler as _IndexBatchSampler
from trainmesh.utilities.index_batches import indexed as indexed
from trainmesh.utilities.rank_zero import rank_zero_warn


def _returned_by_default(value: bool | None) -> bool:
    return True if value is None else bool(value)


@dataclass
class PredictLoop:
    """The predict run's predictions (one loader's list, or a list per loader) and batch indices."""

    predictions: list[Any] = field(default_factory=list)
    epoch_batch_indices: list[list[list[int]]] = field(default_factory=list)
    current_batch_indices: list[int] = field(default_factory=list)
    writers: list[Any] = field(default_factory=list)  # the BasePredictionWriter callbacks
    # What a ``return_predictions`` of True/False/None becomes (the Trainer's ``returns_predictions``:
    # None is "yes" unless the workers are spawned, where True is refused), and the value, False until
    # set (as Lightning's ``_PredictionLoop``).
    decide: Callable[[bool | None], bool] = _returned_by_default
    _return_predictions: bool = False
    counters: Progress | None = None  # the state's predict batch counters (LoopCounters.predict)

    @property
    def batch_progress(self) -> Progress:
        """Lightning's ``trainer.predict_loop.batch_progress`` (1.9's ProgressBarBase reads it): a copy, so
        that a program writing into it changes no count of the run."""
        assert self.counters is not None
        return copy.deepcopy(self.counters)

    @property
    def return_predictions(self) -> bool:
        """Whether the run keeps and returns its predictions (``trainer.predict(return_predictions=...)``)."""
        return self._return_predictions

    @return_predictions.setter
    def return_predictions(self, value: bool | None) -> None:
        # Decided at set time, as Lightning's setter: None is the strategy's default, True under a
        # strategy that spawns is refused here (a program setting it directly sees the same error).
        self._return_predictions = self.decide(value)

    @property
    def keeps_predictions(self) -> bool:
        """Whether the run keeps each batch's predictions: as Lightning's, where they are returned or
        a writer writes them at the epoch's end (else none is held: a long predict run's memory)."""
        return self.return_predictions or any(writer.interval.on_epoch for writer in self.writers)

    def start(self, loaders: int, writers: list[Any]) -> None:
        self.predictions, self.current_batch_indices = [], []
        self.epoch_batch_indices = [[] for _ in range(loaders)]
        self.writers = writers

    def record(self, loader: Any, batch_idx: int, loader_idx: int) -> None:
        """Batch ``batch_idx``'s indices, where a writer wants them (as Lightning, only then)."""
        on_epoch = any(writer.interval.on_epoch for writer in self.writers)
        on_batch = any(writer.interval.on_batch for writer in self.writers)
        if not (on_epoch or on_batch):
            return
        sampler = getattr(getattr(loader, "loader", None), "batch_sampler", None)
        if not isinstance(sampler, _IndexBatchSampler):
            rank_zero_warn(f"Couldn't infer the batch indices fetched from your dataloader: `{type(loader).__name__}`")
            return
        indices = sampler.seen_batch_indices[batch_idx]
        if on_epoch:
            self.epoch_batch_indices[loader_idx].append(indices)
        if on_batch:
            self.current_batch_indices = indices

    def finish(self, per_loader: list[list[Any]]) -> None:
        self.predictions = per_loader[0] if len(per_loader) == 1 else per_loader

    def end(self) -> None:
        """As the run ends, before ``on_predict_end`` (Lightning's ``_on_predict_end``): the batch indices
        are dropped, and the predictions where they are not returned (a writer had them at the epoch's end)."""
        if not self.return_predictions:
            self.predictions = []
        self.epoch_batch_indices = []
