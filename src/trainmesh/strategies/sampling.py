"""Each data-parallel rank reads its own share of the data, as Lightning 2.6's Trainer gives its
ranks (``use_distributed_sampler=True``): training, one shuffled permutation split across the
ranks; validation and test, ``DistributedSampler`` over the loader's order (rank r: samples r,
r+W, ..., padded by repeating the first); prediction, the same shares unpadded. Each rank's share
is batched at the loader's own batch size."""

from __future__ import annotations

import copy
from collections.abc import Sized
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
    InterleavedBatchShard,
    UnrepeatedDistributedSampler,
)


def shard_dataloader(
    loader: Any,
    *,
    dp_rank: int,
    dp_size: int,
    train: bool,
    seed: int,
    shuffle: bool | None = None,
    predict: bool = False,
    wrap_samplers: bool = False,
) -> Any:
    """``loader`` reading only data-parallel rank ``dp_rank``'s share out of ``dp_size``.

    ``seed`` (the same on every rank) shuffles one permutation that the shards split.
    A loader that is already distributed, or not a map-style DataLoader, is kept as it is.
    Evaluation (``train=False``) shards as :func:`shard_for_evaluation` says (``predict``: unpadded).

    ``shuffle`` says how a training loader is ordered: None, by its sampler (a ``RandomSampler``
    shuffles, anything else keeps its order: Lightning's ``Fabric.setup_dataloaders``, and the
    keras-io DDP guide's ``DistributedSampler(shuffle=False)``); True or False, as Lightning's
    Trainer orders every training loader under ``use_distributed_sampler=True``: shuffled with
    ``seed`` (False under ``overfit_batches``), whatever the loader's own sampler, a custom
    sampler's indices permuted as Lightning's ``DistributedSamplerWrapper`` permutes them.
    Evaluation ignores it.

    ``wrap_samplers`` (a pytorch-lightning 1.x module's loaders): every sampler dealt out by
    ``DistributedSamplerWrapper``, as 1.9.5's ``_get_distributed_sampler`` deals it. It differs from
    Lightning 2's ``DistributedSampler(dataset)`` over a ``RandomSampler``: each epoch the sampler
    draws its own permutation from this rank's global generator, which the wrapper then permutes
    with ``seed + epoch`` and splits.
    """
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return loader  # an iterable dataset shards itself (get_worker_info / rank)
    if _already_distributed(loader):
        return loader
    if not train:
        return shard_for_evaluation(loader, dp_size, dp_rank, seed=seed, predict=predict, wrap=wrap_samplers)
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
    if not wrap_samplers and (type(sampler) is SequentialSampler or _plain_shuffle(sampler)):
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
    return _rebatched(loader, batches)


def _plain_shuffle(sampler: Any) -> bool:
    """A RandomSampler that DistributedSampler(shuffle=True) can stand in for without loss."""
    return (
        type(sampler) is RandomSampler
        and not sampler.replacement
        and sampler._num_samples is None
        and sampler.generator is None
    )


def shard_for_evaluation(
    loader: DataLoader[Any], world: int, rank: int, *, seed: int, predict: bool, wrap: bool = False
) -> DataLoader[Any]:
    """Rank ``rank``'s share of an evaluation loader, as Lightning 2.6's Trainer makes it
    (``data_connector._get_distributed_sampler``, ``utilities.data._update_dataloader``).

    Validation and test: ``DistributedSampler`` over the dataset where the loader's sampler is a
    ``SequentialSampler`` or ``RandomSampler`` (shuffled, with ``seed``, only for the latter, as
    Lightning's), else over the loader's own sampler's order (``DistributedSamplerWrapper``): rank r
    reads samples r, r+W, ..., the last padded by repeating the first, so every rank runs as many
    batches and none is empty. Predict: the same shares, unpadded, and ``drop_last=False``. The
    share is batched at the loader's batch size; a batch sampler of the user's own class is made
    again around the share as Lightning makes it (``cls(sampler, batch_size=, drop_last=)``).
    ``wrap``: pytorch-lightning 1.9.5's shares, every sampler's order through the wrapper.
    """
    shuffled = _is_shuffled(loader)
    order = cast("Sampler[int]", loader.sampler)
    share: Any
    if predict:
        share = UnrepeatedDistributedSampler(order, num_replicas=world, rank=rank, shuffle=shuffled)
    elif not wrap and isinstance(loader.sampler, (SequentialSampler, RandomSampler)):
        share = DistributedSampler(loader.dataset, num_replicas=world, rank=rank, shuffle=shuffled, seed=seed)
    else:
        share = DistributedSamplerWrapper(order, num_replicas=world, rank=rank, shuffle=shuffled, seed=seed)
    batches = loader.batch_sampler
    if batches is None:
        return _with_sampler(loader, share)
    drop_last = False if predict else bool(getattr(batches, "drop_last", False))
    if type(batches) is BatchSampler:
        return _rebatched(loader, BatchSampler(share, batches.batch_size, drop_last))
    return replace_batch_sampler(loader, _own_batch_sampler(batches, share, drop_last))


def _rebatched(loader: DataLoader[Any], batches: BatchSampler) -> DataLoader[Any]:
    """``loader`` reading ``batches`` (torch's BatchSampler over a share), its ``batch_size`` and
    ``drop_last`` still saying how it batches where the user's loader batched by ``batch_size``: as
    the ``DataLoader(..., batch_size=, sampler=, drop_last=)`` Lightning makes again (they read None
    and False on a loader given a batch sampler)."""
    clone = replace_batch_sampler(loader, batches)
    if loader.batch_size is not None:
        object.__setattr__(clone, "batch_size", batches.batch_size)
        object.__setattr__(clone, "drop_last", batches.drop_last)
    return clone


def _is_shuffled(loader: DataLoader[Any]) -> bool:
    """Lightning's ``_is_dataloader_shuffled``: whether the sampler that orders the batches is a
    ``RandomSampler`` (a batch sampler's own ``sampler`` where it has one)."""
    batches = loader.batch_sampler
    sampler = loader.sampler if batches is None else getattr(batches, "sampler", batches)
    return isinstance(sampler, RandomSampler)


def _own_batch_sampler(batches: Any, share: Any, drop_last: bool) -> Any:
    """A user's batch sampler class made again around ``share``, as Lightning makes it; refused as
    Lightning refuses it where that cannot be done."""
    cls = type(batches)
    if hasattr(batches, "batch_size") and hasattr(batches, "drop_last"):
        try:
            return cls(share, batch_size=batches.batch_size, drop_last=drop_last)
        except TypeError as error:
            reason = f"{cls.__name__}(sampler, batch_size=..., drop_last=...) failed: {error}"
    else:
        reason = f"{cls.__name__} has no batch_size and drop_last to make it again with"
    raise TypeError(
        f"the evaluation DataLoader's batch sampler cannot be given each process's share of the data: {reason} "
        "(Lightning's Trainer makes it again the same way, unless it recorded the class's arguments in a "
        "*_dataloader hook). Follow the API of torch's BatchSampler (__init__(sampler, batch_size, "
        "drop_last)), or pass use_distributed_sampler=False to the Trainer and split the data in your batch "
        "sampler yourself"
    )


def _with_sampler(loader: DataLoader[Any], sampler: Any) -> DataLoader[Any]:
    clone = copy.copy(loader)
    object.__setattr__(clone, "sampler", sampler)
    object.__setattr__(clone, "_iterator", None)
    return clone


def _already_distributed(loader: DataLoader[Any]) -> bool:
    samplers = [loader.sampler, getattr(loader.batch_sampler, "sampler", None), loader.batch_sampler]
    ours = (DistributedSampler, DistributedSamplerWrapper, UnrepeatedDistributedSampler, InterleavedBatchShard)
    return any(isinstance(s, ours) for s in samplers)
