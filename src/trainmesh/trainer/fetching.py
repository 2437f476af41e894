"""Reading a loop's batches as Lightning 2.6 reads them, no batch more and none earlier.

What a loop reads is visible to the program: each read draws from the global generators (random
transforms, a shuffling sampler's start) and advances an iterable stream, so a batch read past a
``limit_*_batches`` or ``max_steps`` changes the numbers of every later epoch. Lightning's rules
(``loops/fetchers.py``' ``_PrefetchDataFetcher`` over ``utilities/combined_loader.py``' iterators):

- where the number of batches is known (the loader has a length, or the limit is a count), a loop
  reads exactly that many, each when the loop asks for it;
- where it is not (an iterable dataset without ``__len__`` and no count limit), the fetcher reads
  one batch ahead, from the moment the iterator is made, so that it knows which batch is the last;
- an evaluation's loaders are read one after the other (``sequential``), each loader's iterator
  made when the one before it is done; the first is made before the stage's hooks run.

Batches are handed out as the loader made them: the transfer to the device (and Lightning's
batch-transfer hooks) runs when the loop takes a batch, not when it is read ahead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any


class Fetcher:
    """The batches of ``source``; ``length`` of them (``math.inf``: unknown, so read one ahead).

    ``fetched``: batches already taken before this one started (a resumed epoch). ``done`` says,
    once a batch is taken, whether it was the last (Lightning's ``is_last_batch``).
    """

    def __init__(self, source: Iterator[Any], length: int | float, *, fetched: int = 0) -> None:
        self._source, self._length, self.fetched = source, length, fetched
        self.done = fetched >= length
        self._ahead: list[Any] = []
        if length == math.inf:
            try:
                self._ahead.append(self._read())
            except StopIteration:
                pass

    def __iter__(self) -> Fetcher:
        return self

    def __next__(self) -> Any:
        if self._ahead:
            batch = self._ahead.pop()
            try:
                self._ahead.append(self._read())
            except StopIteration:
                pass  # done: the batch handed out now is the last
            return batch
        if self.done:
            raise StopIteration  # never reads past the count
        return self._read()

    def _read(self) -> Any:
        try:
            batch = next(self._source)
        except StopIteration:
            self.done = True
            raise
        self.fetched += 1
        if self._length != math.inf:
            self.done = self.fetched >= self._length
        return batch


class Sequential:
    """``(batch, batch_idx, loader_idx)`` of ``loaders`` one after the other, at most ``limits[i]``
    batches of loader ``i`` (Lightning's ``_Sequential``): a loader's iterator is made (``start``)
    when the loop moves to it, the first one now, and no batch is read past its limit."""

    def __init__(
        self, loaders: Sequence[Any], limits: Sequence[int | float], start: Callable[[Any], Iterator[Any]] = iter
    ) -> None:
        self._loaders, self._limits, self._start = loaders, limits, start
        self._loader_idx, self._batch_idx = 0, 0
        self._iterator: Iterator[Any] | None = start(loaders[0]) if loaders else None

    def __iter__(self) -> Sequential:
        return self

    def __next__(self) -> tuple[Any, int, int]:
        while self._iterator is not None:
            if self._batch_idx < self._limits[self._loader_idx]:
                batch = next(self._iterator, _EXHAUSTED)
                if batch is not _EXHAUSTED:
                    self._batch_idx += 1
                    return batch, self._batch_idx - 1, self._loader_idx
            self._loader_idx, self._batch_idx = self._loader_idx + 1, 0
            more = self._loader_idx < len(self._loaders)
            self._iterator = self._start(self._loaders[self._loader_idx]) if more else None
        raise StopIteration


_EXHAUSTED = object()


def sequential_fetcher(
    loaders: Sequence[Any], limits: Sequence[int | float], start: Callable[[Any], Iterator[Any]] = iter
) -> Fetcher:
    """An evaluation's batches, read as Lightning reads them: ahead only where the total is unknown."""
    return Fetcher(Sequential(loaders, limits, start), sum(limits))
