"""A predict loader's batch sampler wrapped so that the dataset indices of each batch it gives are known
(Lightning's ``_IndexBatchSamplerWrapper``): read by ``trainer.predict_loop`` for ``BasePredictionWriter``,
and the loader a strategy's Lightning-style ``process_dataloader`` override is handed on predict, as
Lightning hands it (``batch_size`` None, the batches from the wrapper)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from trainmesh.utilities.dataloaders import replace_batch_sampler


class IndexBatchSampler:
    """A batch sampler that keeps the indices of the batches it gave in this iteration."""

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler
        self.sampler = getattr(batch_sampler, "sampler", None)
        self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.drop_last = getattr(batch_sampler, "drop_last", False)
        self.seen_batch_indices: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        self.seen_batch_indices = []
        for batch in self.batch_sampler:
            self.seen_batch_indices.append(batch)
            yield batch

    def __len__(self) -> int:
        return len(self.batch_sampler)


def indexed(loader: Any) -> Any:
    """A copy of ``loader`` whose batch sampler records its batches' indices (the loader itself
    where it is no DataLoader with a batch sampler, or records them already: a Lightning-style
    ``process_dataloader`` override handed the indexed predict loader back)."""
    if not isinstance(loader, DataLoader) or loader.batch_sampler is None:
        return loader
    if isinstance(loader.batch_sampler, IndexBatchSampler):
        return loader
    return replace_batch_sampler(loader, IndexBatchSampler(loader.batch_sampler))
