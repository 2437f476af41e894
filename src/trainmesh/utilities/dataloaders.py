"""Rebuild a user's DataLoader with another (batch) sampler, keeping every other setting."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, Sampler

from trainmesh.utilities.data import sized_len


class _SkippingIterator:
    """Iterates ``source`` from position ``skip`` on; the skip runs at the first ``next()``
    or at :meth:`start`, whichever comes first."""

    def __init__(self, source: Any, skip: int) -> None:
        self._source, self._skip = source, skip
        self._iterator: Iterator[Any] | None = None

    def start(self) -> None:
        if self._iterator is None:
            self._iterator = iter(self._source)
            for _ in range(self._skip):
                if next(self._iterator, _EXHAUSTED) is _EXHAUSTED:
                    break

    def __iter__(self) -> _SkippingIterator:
        return self

    def __next__(self) -> Any:
        self.start()
        assert self._iterator is not None
        return next(self._iterator)


_EXHAUSTED = object()


class SkipBatchSampler(Sampler[list[int]]):
    """Yields the batches of ``batch_sampler`` after the first ``skip``.

    Skipping happens on indices, so no sample is loaded for the skipped batches, and the inner
    sampler draws its random order exactly as it did in the run being resumed. The DataLoader
    starts its index iterator before it draws its own worker seed, while the inner sampler
    draws at its first ``next()``: ``begin_skip`` lets the caller run the skip (and the draw)
    right after the DataLoader's iterator exists, keeping the original order of draws.
    """

    def __init__(self, batch_sampler: Any, skip: int) -> None:
        self.batch_sampler = batch_sampler
        self.skip = skip
        self.active: _SkippingIterator | None = None

    def __iter__(self) -> Iterator[list[int]]:
        self.active = _SkippingIterator(self.batch_sampler, self.skip)
        return self.active

    def __len__(self) -> int:
        return max(len(self.batch_sampler) - self.skip, 0)


def begin_skip(loader: Any) -> None:
    """Run the pending skip of a loader made by :func:`skip_batches` whose iterator has started."""
    for holder in (getattr(loader, "batch_sampler", None), getattr(loader, "sampler", None)):
        if isinstance(holder, (SkipBatchSampler, _SkipSampler)) and holder.active is not None:
            holder.active.start()
            return


def has_len(loader: Any) -> bool:
    return sized_len(loader) is not None


def replace_batch_sampler(loader: DataLoader, batch_sampler: Any) -> DataLoader:
    """A shallow copy of ``loader`` that draws its batches from ``batch_sampler``.

    A copy (rather than calling ``DataLoader(...)`` again) keeps subclasses and every option
    intact. ``DataLoader`` forbids setting ``batch_sampler`` after construction, hence
    ``object.__setattr__``; the copy gets its own iterator state.
    """
    clone = copy.copy(loader)
    object.__setattr__(clone, "batch_sampler", batch_sampler)
    object.__setattr__(clone, "sampler", getattr(batch_sampler, "sampler", loader.sampler))
    object.__setattr__(clone, "batch_size", None)
    object.__setattr__(clone, "drop_last", False)
    object.__setattr__(clone, "_iterator", None)
    return clone


def with_worker_init_fn(loader: Any, worker_init_fn: Callable[[int], None]) -> Any:
    """A shallow copy of ``loader`` whose worker processes start with ``worker_init_fn``.

    ``loader`` itself when it is no DataLoader, has no workers, or names a ``worker_init_fn``
    of its own (the user's choice stands). The user's loader is never changed.
    """
    if not isinstance(loader, DataLoader) or loader.num_workers == 0 or loader.worker_init_fn is not None:
        return loader
    clone = copy.copy(loader)
    clone.worker_init_fn = worker_init_fn
    object.__setattr__(clone, "_iterator", None)  # persistent workers: the copy starts its own
    return clone


def skip_batches(loader: Any, skip: int) -> Any:
    """``loader`` starting at batch ``skip`` of its next epoch (for a mid-epoch resume)."""
    if skip <= 0:
        return loader
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return _ConsumingSkip(loader, skip)
    if loader.batch_sampler is None:
        # Unbatched loaders fetch one sample per index; skipping whole indices keeps that.
        clone = copy.copy(loader)
        object.__setattr__(clone, "sampler", _SkipSampler(loader.sampler, skip))
        object.__setattr__(clone, "_iterator", None)
        return clone
    return replace_batch_sampler(loader, SkipBatchSampler(loader.batch_sampler, skip))


class _SkipSampler(Sampler[int]):
    def __init__(self, sampler: Any, skip: int) -> None:
        self.sampler, self.skip = sampler, skip
        self.active: _SkippingIterator | None = None

    def __iter__(self) -> Iterator[int]:
        self.active = _SkippingIterator(self.sampler, self.skip)
        return self.active

    def __len__(self) -> int:
        return max(len(self.sampler) - self.skip, 0)


class _ConsumingSkip:
    """For loaders without indices (iterable datasets): fetch and drop the first batches."""

    def __init__(self, loader: Any, skip: int) -> None:
        self.loader, self.skip = loader, skip

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self.loader)
        for _ in range(self.skip):
            if next(iterator, _EXHAUSTED) is _EXHAUSTED:
                break
        return iterator

    def __len__(self) -> int:
        return max(len(self.loader) - self.skip, 0)
