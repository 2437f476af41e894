"""Each data-parallel rank reads its own share of the data: samplers for training (one shuffled
permutation split across the ranks) and for evaluation (the batches dealt out in turn, every
sample once, so that a limit on the batches reads the loader's first ones)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sized
from typing import Any, cast

from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from trainmesh.utilities.dataloaders import replace_batch_sampler
from trainmesh.utilities.distributed_samplers import (
    DistributedSamplerWrapper,
    EqualLengthLoader,
    InterleavedBatchShard,
    InterleavedShardSampler,
)


def shard_dataloader(
    loader: Any,
    *,
    dp_rank: int,
    dp_size: int,
    train: bool,
    seed: int,
    longest: Callable[[int], int],
    shuffle: bool | None = None,
) -> Any:
    """``loader`` reading only data-parallel rank ``dp_rank``'s share out of ``dp_size``.

    ``seed`` (the same on every rank) shuffles one permutation that the shards split.
    ``longest(n)`` is the largest ``n`` over the ranks (a collective): evaluation shards are
    padded to it with empty batches, so every rank runs as many steps and collectives.
    A loader that is already distributed, or not a map-style DataLoader, is kept as it is.

    ``shuffle`` says how a training loader is ordered: None, by its sampler (a ``RandomSampler``
    shuffles, anything else keeps its order: Lightning's ``Fabric.setup_dataloaders``, and the
    keras-io DDP guide's ``DistributedSampler(shuffle=False)``); True or False, as Lightning's
    Trainer orders every training loader under ``use_distributed_sampler=True``: shuffled with
    ``seed`` (False under ``overfit_batches``), whatever the loader's own sampler, a custom
    sampler's indices permuted as Lightning's ``DistributedSamplerWrapper`` permutes them.
    Evaluation ignores it.
    """
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return loader  # an iterable dataset shards itself (get_worker_info / rank)
    if _already_distributed(loader):
        return loader
    if not train:
        sharded = _shard_for_evaluation(loader, dp_size, dp_rank)
        if sharded.batch_sampler is None:
            return sharded  # unbatched loaders have no empty batch to pad with
        return EqualLengthLoader(sharded, longest)
    dataset = cast(Sized, loader.dataset)  # map-style (an iterable one returned above): it has a length
    if len(dataset) == 0:
        # Empty on every rank alike: the fit loop warns and trains nothing, as on one device.
        return loader
    if len(dataset) < dp_size:
        raise ValueError(
            f"the training set has {len(dataset)} sample(s) but there are {dp_size} processes reading "
            "their own share of it (data-parallel ranks); every one needs at least one sample. Use fewer "
            "devices or more data"
        )
    sampler = loader.sampler
    if type(sampler) is SequentialSampler or _plain_shuffle(sampler):
        shuffled = type(sampler) is RandomSampler if shuffle is None else shuffle
        shard: Any = DistributedSampler(loader.dataset, num_replicas=dp_size, rank=dp_rank, shuffle=shuffled, seed=seed)
    else:
        # By its sampler (None), a custom sampler's order is kept: Fabric's wrapper is never asked to
        # shuffle (a RandomSampler gets a DistributedSampler there, as here).
        shard = DistributedSamplerWrapper(
            cast(Sampler[int], sampler), num_replicas=dp_size, rank=dp_rank, shuffle=bool(shuffle), seed=seed
        )
    if loader.batch_sampler is None:
        return _with_sampler(loader, shard)
    if type(loader.batch_sampler) is not BatchSampler:
        raise ValueError(
            f"the training DataLoader uses a custom batch_sampler ({type(loader.batch_sampler).__name__}), "
            "which trainmesh cannot split across processes; make it distributed yourself (it will be "
            "kept as it is), or use sampler= with batch_size="
        )
    batches = BatchSampler(shard, loader.batch_sampler.batch_size, loader.batch_sampler.drop_last)
    return replace_batch_sampler(loader, batches)


def _plain_shuffle(sampler: Any) -> bool:
    """A RandomSampler that DistributedSampler(shuffle=True) can stand in for without loss."""
    return (
        type(sampler) is RandomSampler
        and not sampler.replacement
        and sampler._num_samples is None
        and sampler.generator is None
    )


def _shard_for_evaluation(loader: DataLoader[Any], world: int, rank: int) -> DataLoader[Any]:
    """Rank r: the loader's batches r, r+W, ... (unbatched: its samples so), no padding.

    Not contiguous runs: with ``limit_val_batches=k`` (or the sanity check) the ranks would read the
    first k batches of each run, samples one process at the global batch never reads together,
    where Lightning's ``DistributedSampler`` and one process read the first k*W*B samples.
    """
    if loader.batch_sampler is None:
        order = None if type(loader.sampler) is SequentialSampler else loader.sampler
        return _with_sampler(
            loader,
            InterleavedShardSampler(
                cast(Sized, loader.dataset), num_replicas=world, rank=rank, sampler=cast("Sampler[int] | None", order)
            ),
        )
    batches = cast(Sampler[list[int]], loader.batch_sampler)
    return replace_batch_sampler(loader, InterleavedBatchShard(batches, num_replicas=world, rank=rank))


def _with_sampler(loader: DataLoader[Any], sampler: Any) -> DataLoader[Any]:
    clone = copy.copy(loader)
    object.__setattr__(clone, "sampler", sampler)
    object.__setattr__(clone, "_iterator", None)
    return clone


def _already_distributed(loader: DataLoader[Any]) -> bool:
    samplers = [loader.sampler, getattr(loader.batch_sampler, "sampler", None), loader.batch_sampler]
    ours = (DistributedSampler, DistributedSamplerWrapper, InterleavedShardSampler, InterleavedBatchShard)
    return any(isinstance(s, ours) for s in samplers)
