"""Splitting indices across ranks: every-W-th batch for Keras' own evaluation, contiguous runs of
batches for Keras' prediction, every-W-th sample with padding for training and the Trainer's
validation and test, without padding for its prediction."""

import pytest
import torch
from torch.utils.data import BatchSampler, SequentialSampler, SubsetRandomSampler, WeightedRandomSampler

from trainmesh.utilities.distributed_samplers import (
    ContiguousBatchShard,
    DistributedSamplerWrapper,
    InterleavedBatchShard,
    UnrepeatedDistributedSampler,
    shard_bounds,
)


# ---- shard_bounds ------------------------------------------------------------------------------
@pytest.mark.parametrize("world", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 7, 16, 63, 100, 1001])
def test_shard_bounds_cover_every_index_once_in_order(n, world):
    bounds = [shard_bounds(n, world, rank) for rank in range(world)]
    covered = [i for start, end in bounds for i in range(start, end)]
    assert covered == list(range(n))
    sizes = [end - start for start, end in bounds]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the earlier ranks take the remainder


def test_shard_bounds_with_fewer_samples_than_ranks_leaves_later_ranks_empty():
    assert [shard_bounds(2, 4, rank) for rank in range(4)] == [(0, 1), (1, 2), (2, 2), (2, 2)]


# ---- ContiguousBatchShard ----------------------------------------------------------------------
@pytest.mark.parametrize("world", [2, 3])
def test_contiguous_batch_shards_concatenate_to_the_one_process_batches(world):
    def batches():
        return BatchSampler(SequentialSampler(range(1001)), batch_size=16, drop_last=False)

    single = list(batches())
    shards = [ContiguousBatchShard(batches(), num_replicas=world, rank=rank) for rank in range(world)]
    per_rank = [list(shard) for shard in shards]
    assert [batch for part in per_rank for batch in part] == single
    assert [len(shard) for shard in shards] == [len(part) for part in per_rank]
    assert sum(len(shard) for shard in shards) == len(single) == 63
    assert len(single[-1]) == 1001 % 16  # the short last batch stays short: no padding


def test_contiguous_batch_shard_with_more_ranks_than_batches():
    inner = BatchSampler(SequentialSampler(range(5)), batch_size=4, drop_last=False)
    parts = [list(ContiguousBatchShard(inner, num_replicas=3, rank=rank)) for rank in range(3)]
    assert parts == [[[0, 1, 2, 3]], [[4]], []]


# ---- InterleavedBatchShard ---------------------------------------------------------------------
def in_turn(parts: list[list]) -> list:
    """The ranks' items taken back in turn (rank 0's first, rank 1's first, ..., rank 0's second)."""
    return [part[turn] for turn in range(max(map(len, parts))) for part in parts if turn < len(part)]


@pytest.mark.parametrize("world", [2, 3])
def test_interleaved_batch_shards_taken_in_turn_are_the_one_process_batches(world):
    def batches():
        return BatchSampler(SequentialSampler(range(1001)), batch_size=16, drop_last=False)

    single = list(batches())
    shards = [InterleavedBatchShard(batches(), num_replicas=world, rank=rank) for rank in range(world)]
    per_rank = [list(shard) for shard in shards]
    assert in_turn(per_rank) == single
    assert [len(shard) for shard in shards] == [len(part) for part in per_rank]
    assert sum(len(shard) for shard in shards) == len(single) == 63
    assert len(single[-1]) == 1001 % 16  # the short last batch stays short: no padding


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("limit", [1, 2, 5])
def test_the_first_batches_of_interleaved_shards_are_the_first_batches_of_the_loader(world, limit):
    """limit_val_batches=k: the ranks' first k batches together are one process's first k*W."""
    single = list(BatchSampler(SequentialSampler(range(200)), batch_size=4, drop_last=False))
    shards = [
        InterleavedBatchShard(
            BatchSampler(SequentialSampler(range(200)), batch_size=4, drop_last=False), num_replicas=world, rank=rank
        )
        for rank in range(world)
    ]
    firsts = [list(shard)[:limit] for shard in shards]
    assert sorted(i for part in firsts for batch in part for i in batch) == list(range(4 * limit * world))
    assert in_turn(firsts) == single[: limit * world]


def test_interleaved_batch_shard_with_more_ranks_than_batches():
    inner = BatchSampler(SequentialSampler(range(5)), batch_size=4, drop_last=False)
    shards = [InterleavedBatchShard(inner, num_replicas=3, rank=rank) for rank in range(3)]
    assert [list(shard) for shard in shards] == [[[0, 1, 2, 3]], [[4]], []]
    assert [len(shard) for shard in shards] == [1, 1, 0]


# ---- UnrepeatedDistributedSampler --------------------------------------------------------------
def test_unrepeated_sampler_deals_out_its_sampler_s_order_without_padding():
    """Lightning's own is compared with it rank by rank in tests/strategies/test_ddp_dataloaders.py."""
    subset = SubsetRandomSampler(list(range(11)), generator=torch.Generator().manual_seed(3))
    expected = list(SubsetRandomSampler(list(range(11)), generator=torch.Generator().manual_seed(3)))
    parts = [
        list(
            UnrepeatedDistributedSampler(
                SubsetRandomSampler(list(range(11)), generator=torch.Generator().manual_seed(3)),
                num_replicas=2,
                rank=rank,
            )
        )
        for rank in range(2)
    ]
    assert in_turn(parts) == expected and [len(part) for part in parts] == [6, 5]
    assert len(UnrepeatedDistributedSampler(subset, num_replicas=2, rank=1)) == 5


# ---- DistributedSamplerWrapper -----------------------------------------------------------------
def weighted(seed: int = 11, num_samples: int = 23) -> WeightedRandomSampler:
    weights = torch.linspace(0.1, 1.0, 40)
    return WeightedRandomSampler(
        weights, num_samples=num_samples, replacement=True, generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize("world", [2, 3, 4])
def test_wrapper_over_a_weighted_sampler_splits_one_epoch_across_ranks(world):
    reference = list(weighted())
    # One inner sampler per rank, seeded alike: what each process of a real run holds.
    wrappers = [DistributedSamplerWrapper(weighted(), num_replicas=world, rank=rank) for rank in range(world)]
    parts = [list(wrapper) for wrapper in wrappers]
    lengths = {len(part) for part in parts}
    assert lengths == {len(wrappers[0])} == {-(-23 // world)}
    # Rank r holds every world-th index starting at r: interleaving the ranks rebuilds the order.
    interleaved = [parts[rank][i] for i in range(len(parts[0])) for rank in range(world)]
    assert interleaved[:23] == reference
    assert interleaved[23:] == reference[: len(interleaved) - 23]  # padding repeats from the start
    assert set().union(*map(set, parts)) == set(reference)


def test_wrapper_iterates_a_fresh_draw_each_epoch():
    wrapper = DistributedSamplerWrapper(weighted(num_samples=200), num_replicas=2, rank=0)
    assert list(wrapper) != list(wrapper)


class EpochAwareSampler(SequentialSampler):
    def __init__(self, data):
        super().__init__(data)
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def test_wrapper_forwards_set_epoch_to_its_sampler():
    inner = EpochAwareSampler(range(6))
    wrapper = DistributedSamplerWrapper(inner, num_replicas=2, rank=1)
    wrapper.set_epoch(3)
    wrapper.set_epoch(4)
    assert inner.epochs == [3, 4] and wrapper.epoch == 4
    DistributedSamplerWrapper(weighted(), num_replicas=2, rank=0).set_epoch(1)  # no set_epoch: ignored
    assert list(wrapper) == [1, 3, 5]


def test_wrapper_over_an_empty_sampler_yields_nothing():
    wrapper = DistributedSamplerWrapper(SequentialSampler(range(0)), num_replicas=2, rank=1)
    assert list(wrapper) == [] and len(wrapper) == 0


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize(("n", "world"), [(7, 2), (10, 3), (2, 4)])
def test_wrapper_reads_what_lightning_s_wrapper_reads(shuffle, n, world):
    """Lightning's Trainer wraps a sampler of one's own in its DistributedSamplerWrapper with
    shuffle=True and the seed (its docstring says they have no effect; they permute the positions)."""
    lightning = pytest.importorskip("lightning.fabric.utilities.distributed")
    for epoch in (0, 1):
        for rank in range(world):
            inner = list(range(n - 1, -1, -1))  # an order of one's own: backwards
            theirs = lightning.DistributedSamplerWrapper(inner, num_replicas=world, rank=rank, shuffle=shuffle, seed=5)
            ours = DistributedSamplerWrapper(inner, num_replicas=world, rank=rank, shuffle=shuffle, seed=5)
            theirs.set_epoch(epoch)
            ours.set_epoch(epoch)
            assert list(ours) == list(theirs) and len(ours) == len(theirs)
