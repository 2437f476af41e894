"""Samplers that split a dataset across processes.

Training uses PyTorch's ``DistributedSampler`` (every rank the same number of batches, as DDP
needs). Evaluation interleaves without padding (rank r: the loader's batches r, r+W, r+2W, ...),
so every sample is seen exactly once, and the first k batches of every rank together are the
loader's first k*W batches: ``limit_val_batches=k`` (and the sanity check) reads what one process
at the global batch reads, and what Lightning's ``DistributedSampler`` gives its ranks.
(``ContiguousBatchShard`` remains for Keras' prediction: each process a run, concatenated in order.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from typing import Any, cast

from torch.utils.data import Dataset, DistributedSampler, Sampler

from trainmesh.utilities.collections import apply_to_tensors
from trainmesh.utilities.collections import is_padding as is_padding  # re-exported: it lives with first_tensor


def shard_bounds(num_samples: int, num_replicas: int, rank: int) -> tuple[int, int]:
    """[start, end) of ``rank``'s contiguous shard; shard sizes differ by at most one."""
    base, extra = divmod(num_samples, num_replicas)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class ContiguousBatchShard(Sampler[list[int]]):
    """This rank's contiguous run of the batches ``batch_sampler`` makes.

    Each batch is exactly the batch one process would see, so per-batch results (predictions,
    batch metrics) are bit-identical to a one-process run; the rank order is dataset order.
    """

    def __init__(self, batch_sampler: Sampler[list[int]], *, num_replicas: int, rank: int) -> None:
        self.batch_sampler, self.num_replicas, self.rank = batch_sampler, num_replicas, rank

    def __iter__(self) -> Iterator[list[int]]:
        batches = list(self.batch_sampler)
        start, end = shard_bounds(len(batches), self.num_replicas, self.rank)
        return iter(batches[start:end])

    def __len__(self) -> int:
        start, end = shard_bounds(len(self.batch_sampler), self.num_replicas, self.rank)  # type: ignore[arg-type]
        return end - start


class InterleavedBatchShard(Sampler[list[int]]):
    """This rank's batches of ``batch_sampler``: batches ``rank``, ``rank + W``, ``rank + 2W``, ...

    Each batch is exactly the batch one process would see (per-batch results are a one-process
    run's), and the ranks' k-th batches are the loader's batches k*W to k*W + W - 1, so a limit on
    the batches (``limit_val_batches``, the sanity check's steps) reads the loader's first batches,
    as one process at the global batch does. Counts differ by at most one batch, the earlier ranks
    holding the extra one.
    """

    def __init__(self, batch_sampler: Sampler[list[int]], *, num_replicas: int, rank: int) -> None:
        self.batch_sampler, self.num_replicas, self.rank = batch_sampler, num_replicas, rank

    def __iter__(self) -> Iterator[list[int]]:
        for index, batch in enumerate(self.batch_sampler):
            if index % self.num_replicas == self.rank:
                yield batch

    def __len__(self) -> int:
        return len(range(self.rank, len(self.batch_sampler), self.num_replicas))  # type: ignore[arg-type]


class InterleavedShardSampler(Sampler[int]):
    """Every W-th index of the order ``sampler`` gives (or of 0..n-1), from ``rank``, no padding:
    an unbatched evaluation loader's share, as ``InterleavedBatchShard`` is a batched one's."""

    def __init__(self, source: Sized, *, num_replicas: int, rank: int, sampler: Sampler[int] | None = None) -> None:
        # A sampler may yield fewer or more indices than the dataset has (a subset, weights).
        self.num_samples = len(sampler) if sampler is not None else len(source)  # type: ignore[arg-type]
        self.num_replicas, self.rank, self.sampler = num_replicas, rank, sampler

    def __iter__(self) -> Iterator[int]:
        order = list(self.sampler) if self.sampler is not None else range(self.num_samples)
        return iter(order[self.rank :: self.num_replicas])

    def __len__(self) -> int:
        return len(range(self.rank, self.num_samples, self.num_replicas))


class DistributedSamplerWrapper(Sampler[int]):
    """Shards a custom sampler's indices across ranks for training, as Lightning's wrapper does.

    The user's sampler decides which indices (weighted, stratified, ...); this rank takes every
    W-th of them, padded by repetition so that every rank gets the same count (as
    ``DistributedSampler`` does). With ``shuffle`` (what Lightning's Trainer asks of its
    ``DistributedSamplerWrapper`` for training) the positions in the sampler's list are first
    permuted with ``seed + epoch``: Lightning's ``DistributedSampler`` over the list, which its
    ranks read.
    """

    def __init__(
        self, sampler: Sampler[int], *, num_replicas: int, rank: int, shuffle: bool = False, seed: int = 0
    ) -> None:
        self.sampler, self.num_replicas, self.rank = sampler, num_replicas, rank
        self.shuffle, self.seed = shuffle, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        order = list(self.sampler)
        # Lightning's DistributedSamplerWrapper: torch's DistributedSampler over the sampler's
        # positions (its permutation, its padding), each position then read from the list.
        positions: DistributedSampler[int] = DistributedSampler(
            cast("Dataset[int]", range(len(self.sampler))),  # type: ignore[arg-type]
            num_replicas=self.num_replicas,
            rank=self.rank,
            shuffle=self.shuffle,
            seed=self.seed,
        )
        positions.set_epoch(self.epoch)
        return iter([order[position] for position in positions])

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.num_replicas)  # type: ignore[arg-type]


class EqualLengthLoader:
    """A rank's evaluation shard, then empty batches up to the longest shard's batch count.

    Evaluation shards differ by a batch; ranks that run collectives per step (fsdp's
    all-gathers, a ``self.all_gather`` or ``sync_dist`` in ``validation_step``) must run as many
    steps as each other. An empty batch (every tensor sliced to 0 rows) carries no data: its
    logged values weigh 0 and its predictions are dropped.
    """

    def __init__(self, loader: Any, longest_of: Callable[[int], int]) -> None:
        self.loader, self._longest_of = loader, longest_of
        self._longest: int | None = None

    def __len__(self) -> int:
        if self._longest is None:
            self._longest = self._longest_of(len(self.loader))  # a collective: every rank asks
        return self._longest

    def __iter__(self) -> Iterator[Any]:
        longest, last, count = len(self), None, 0
        for batch in self.loader:
            last, count = batch, count + 1
            yield batch
        if count < longest:
            template = last if last is not None else self._one_sample_batch()
            empty = apply_to_tensors(template, lambda t: t[:0])
            for _ in range(longest - count):
                yield empty

    def _one_sample_batch(self) -> Any:
        # This rank's shard is empty: make the padding's structure from the dataset's first sample.
        return self.loader.collate_fn([self.loader.dataset[0]])

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
