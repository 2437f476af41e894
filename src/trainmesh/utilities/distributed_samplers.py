"""Samplers that split a dataset across processes.

Training and the Trainer's validation and test use PyTorch's ``DistributedSampler`` (or, over a
sampler of the user's own, ``DistributedSamplerWrapper``): rank r reads samples r, r+W, ... of the
loader's order, the last ones padded by repeating the first so every rank holds as many, as
Lightning 2.6's Trainer gives its ranks. Prediction reads the same shares unpadded
(``UnrepeatedDistributedSampler``, Lightning's ``UnrepeatedDistributedSamplerWrapper``): every
sample once, the ranks' counts differing by at most one. Keras' own evaluation deals batches out in
turn (``InterleavedBatchShard``) and predicts contiguous runs (``ContiguousBatchShard``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import torch
from torch.utils.data import Dataset, DistributedSampler, Sampler


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


class UnrepeatedDistributedSampler(Sampler[int]):
    """Positions ``rank``, ``rank + W``, ... of the order ``sampler`` gives, unpadded: Lightning's
    ``UnrepeatedDistributedSamplerWrapper``, which its Trainer gives every predict loader.

    Every sample is read once; ranks hold counts that differ by at most one (a rank may hold none
    when there are fewer samples than ranks). With ``shuffle`` the positions are first permuted
    with a generator seeded by the epoch alone, as Lightning's (its seed is not used there).
    """

    def __init__(self, sampler: Sampler[int], *, num_replicas: int, rank: int, shuffle: bool = False) -> None:
        self.sampler, self.num_replicas, self.rank, self.shuffle = sampler, num_replicas, rank, shuffle
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        order = list(self.sampler)
        if self.shuffle:
            positions = torch.randperm(len(order), generator=torch.Generator().manual_seed(self.epoch)).tolist()
        else:
            positions = list(range(len(order)))
        return iter([order[position] for position in positions[self.rank :: self.num_replicas]])

    def __len__(self) -> int:
        return len(range(self.rank, len(self.sampler), self.num_replicas))  # type: ignore[arg-type]
