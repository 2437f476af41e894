"""DDPStrategy.process_dataloader without a process group: the strategy is given its place in
the run directly, as the launcher would, and each rank's view is built in this one process."""

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
)

from trainmesh.precision import Precision
from trainmesh.strategies.ddp import DDPStrategy
from trainmesh.strategies.mesh import ParallelMesh
from trainmesh.strategies.protocol import Placement
from trainmesh.utilities.distributed_samplers import (
    DistributedSamplerWrapper,
    EqualLengthLoader,
    InterleavedBatchShard,
    InterleavedShardSampler,
    is_padding,
)


def strategy_for(rank: int, world: int = 2) -> DDPStrategy:
    strategy = DDPStrategy(placement=Placement("cpu", tuple(range(world)), 1, Precision("32", device_type="cpu")))
    # What setup_environment builds in rank `rank` of `world` processes (no process group here).
    strategy._mesh = ParallelMesh(strategy.dims(world), global_rank=rank)
    return strategy


def indices(n: int) -> TensorDataset:
    return TensorDataset(torch.arange(n))


def seen(loader) -> list[int]:
    """The sample indices a loader yields, in order (works batched and unbatched)."""
    return [int(i) for batch in loader for i in batch[0].reshape(-1)]


# ---- training ----------------------------------------------------------------------------------
def test_unshuffled_training_loader_gets_an_unshuffled_distributed_sampler():
    loader = DataLoader(indices(20), batch_size=4, shuffle=False)
    sharded = strategy_for(1).process_dataloader(loader, train=True, seed=1234)
    sampler = sharded.sampler
    assert type(sampler) is DistributedSampler
    assert (sampler.shuffle, sampler.num_replicas, sampler.rank) == (False, 2, 1)
    assert sharded.batch_sampler.sampler is sampler and sharded.batch_sampler.batch_size == 4
    assert seen(sharded) == list(range(1, 20, 2))
    assert [len(batch[0]) for batch in sharded] == [4, 4, 2] and len(sharded) == 3
    assert seen(strategy_for(0).process_dataloader(loader, train=True, seed=1234)) == list(range(0, 20, 2))
    assert seen(loader) == list(range(20))  # the user's loader is left as it was
    assert type(loader.sampler) is SequentialSampler


def test_shuffled_training_loader_gets_a_seeded_shuffling_distributed_sampler():
    loader = DataLoader(indices(50), batch_size=5, shuffle=True)
    ranks = [strategy_for(rank).process_dataloader(loader, train=True, seed=1234) for rank in range(2)]
    for rank, sharded in enumerate(ranks):
        assert type(sharded.sampler) is DistributedSampler
        assert sharded.sampler.shuffle and sharded.sampler.seed == 1234 and sharded.sampler.rank == rank

    def epoch(e: int) -> list[list[int]]:
        for sharded in ranks:
            sharded.sampler.set_epoch(e)
        return [seen(sharded) for sharded in ranks]

    first = epoch(0)
    # Both ranks' views are halves of one permutation: disjoint, together every sample once.
    assert sorted(first[0] + first[1]) == list(range(50))
    assert first[0] != list(range(0, 50, 2))
    assert epoch(0) == first  # the same epoch reproduces the same order
    second = epoch(1)
    assert second[0] != first[0] and sorted(second[0] + second[1]) == list(range(50))
    # The shared permutation is the one DistributedSampler derives from seed + epoch.
    permutation = torch.randperm(50, generator=torch.Generator().manual_seed(1234 + 1)).tolist()
    assert second == [permutation[0::2], permutation[1::2]]


@pytest.mark.parametrize("shuffle_given", [False, True])
def test_the_trainer_s_shuffle_overrides_the_loader_s_own(shuffle_given):
    """shuffle=True/False (Lightning's Trainer: every training loader shuffled, none under
    overfit_batches) whatever the loader says; the seed is the run's."""
    loader = DataLoader(indices(20), batch_size=4, shuffle=not shuffle_given)
    sharded = strategy_for(0).process_dataloader(loader, train=True, seed=7, shuffle=shuffle_given)
    assert (sharded.sampler.shuffle, sharded.sampler.seed) == (shuffle_given, 7)
    assert seen(sharded) == list(DistributedSampler(range(20), num_replicas=2, rank=0, shuffle=shuffle_given, seed=7))


def test_a_distributed_sampler_the_user_made_is_not_sharded_again():
    data = indices(20)
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, num_replicas=2, rank=1, shuffle=False))
    assert strategy_for(1).process_dataloader(loader, train=True, seed=1234) is loader
    assert strategy_for(1).process_dataloader(loader, train=False, seed=1234) is loader
    assert seen(loader) == list(range(1, 20, 2))


def test_processing_twice_keeps_the_first_sharding():
    strategy = strategy_for(1)
    once = strategy.process_dataloader(DataLoader(indices(20), batch_size=4), train=True, seed=1234)
    assert strategy.process_dataloader(once, train=True, seed=1234) is once


def test_a_custom_sampler_is_wrapped_and_keeps_deciding_the_order():
    weights = torch.linspace(0.1, 1.0, 30)

    def loader() -> DataLoader:
        sampler = WeightedRandomSampler(weights, num_samples=30, generator=torch.Generator().manual_seed(5))
        return DataLoader(indices(30), batch_size=4, sampler=sampler)

    ranks = [strategy_for(rank).process_dataloader(loader(), train=True, seed=1234) for rank in range(2)]
    for rank, sharded in enumerate(ranks):
        assert type(sharded.sampler) is DistributedSamplerWrapper and sharded.sampler.rank == rank
        assert isinstance(sharded.sampler.sampler, WeightedRandomSampler)
    reference = seen(loader())
    views = [seen(sharded) for sharded in ranks]
    assert views == [reference[0::2], reference[1::2]]
    assert len(views[0]) == len(views[1]) == 15 and len(ranks[0]) == 4


def test_a_training_set_smaller_than_the_world_is_refused():
    with pytest.raises(ValueError, match="1 sample.*2 processes"):
        strategy_for(1).process_dataloader(DataLoader(indices(1), batch_size=1), train=True, seed=1234)


def test_an_empty_training_set_gives_every_rank_no_batches_as_on_one_device():
    # One device warns that the train dataloader is empty and trains nothing; ddp does the same
    # on every rank instead of refusing a set "smaller than the world".
    for rank in range(2):
        loader = strategy_for(rank).process_dataloader(DataLoader(indices(0), batch_size=4), train=True, seed=1234)
        assert len(loader) == 0 and seen(loader) == []


def test_a_custom_batch_sampler_is_refused_for_training():
    class EveryOther(BatchSampler):
        pass

    loader = DataLoader(indices(8), batch_sampler=EveryOther(SequentialSampler(range(8)), 2, False))
    with pytest.raises(ValueError, match="EveryOther"):
        strategy_for(0).process_dataloader(loader, train=True, seed=1234)


def test_unbatched_training_loader_is_sharded_sample_by_sample():
    loader = DataLoader(indices(9), batch_size=None)
    ranks = [strategy_for(rank).process_dataloader(loader, train=True, seed=1234) for rank in range(2)]
    for sharded in ranks:
        assert sharded.batch_sampler is None and type(sharded.sampler) is DistributedSampler
    views = [[int(sample[0]) for sample in sharded] for sharded in ranks]
    # DistributedSampler pads 9 samples to 10 by repeating the first.
    assert views == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 0]]
    assert [len(sharded) for sharded in ranks] == [5, 5]


def test_other_dataloader_options_are_kept():
    def collate(samples):
        return ("collated", torch.stack([s[0] for s in samples]))

    loader = DataLoader(
        indices(22),
        batch_size=4,
        shuffle=False,
        num_workers=2,
        collate_fn=collate,
        pin_memory=True,
        drop_last=True,
        persistent_workers=False,
        timeout=20,
    )
    sharded = strategy_for(1).process_dataloader(loader, train=True, seed=1234)
    assert (sharded.num_workers, sharded.collate_fn, sharded.pin_memory, sharded.timeout) == (2, collate, True, 20)
    assert sharded.batch_sampler.drop_last is True
    assert len(sharded) == 2  # 11 samples on this rank: two full batches, the partial one dropped
    sharded.pin_memory = False  # no accelerator to pin for on this machine
    batches = list(sharded)
    assert [tag for tag, _ in batches] == ["collated", "collated"]
    assert [b.tolist() for _, b in batches] == [[1, 3, 5, 7], [9, 11, 13, 15]]


# ---- evaluation --------------------------------------------------------------------------------
@pytest.mark.parametrize("world", [2, 3])
def test_evaluation_loaders_get_interleaved_unpadded_shards(world):
    loader = DataLoader(indices(1001), batch_size=16)
    padded = [strategy_for(rank, world).process_dataloader(loader, train=False, seed=1234) for rank in range(world)]
    assert all(isinstance(p, EqualLengthLoader) for p in padded)  # equal step counts (see below)
    shards = [p.loader for p in padded]
    for sharded in shards:
        assert type(sharded.batch_sampler) is InterleavedBatchShard
    batches = [[b[0].tolist() for b in sharded] for sharded in shards]
    in_turn = [part[turn] for turn in range(len(batches[0])) for part in batches if turn < len(part)]
    assert in_turn == [b[0].tolist() for b in loader]  # rank r: the loader's batches r, r+W, ...
    assert sum(len(sharded) for sharded in shards) == len(loader) == 63


def test_unbatched_evaluation_loader_gets_an_interleaved_sample_shard():
    loader = DataLoader(indices(7), batch_size=None)
    shards = [strategy_for(rank).process_dataloader(loader, train=False, seed=1234) for rank in range(2)]
    assert all(type(s.sampler) is InterleavedShardSampler for s in shards)
    views = [[int(sample[0]) for sample in s] for s in shards]
    assert views == [[0, 2, 4, 6], [1, 3, 5]]
    assert [len(s) for s in shards] == [4, 3]


def test_unbatched_evaluation_loader_keeps_its_samplers_order():
    def loader() -> DataLoader:
        return DataLoader(
            indices(7), batch_size=None, sampler=RandomSampler(range(7), generator=torch.Generator().manual_seed(2))
        )

    reference = [int(s[0]) for s in loader()]
    views = [
        [int(s[0]) for s in strategy_for(rank).process_dataloader(loader(), train=False, seed=1234)]
        for rank in range(2)
    ]
    assert views[0] == reference[0::2] and views[1] == reference[1::2] and len(views[0]) == 4


def test_unbatched_evaluation_loader_over_a_subset_has_the_length_it_yields():
    loader = DataLoader(
        indices(100),
        batch_size=None,
        sampler=SubsetRandomSampler(list(range(10)), generator=torch.Generator().manual_seed(0)),
    )
    sharded = strategy_for(0).process_dataloader(loader, train=False, seed=1234)
    assert len(sharded) == len(list(sharded))


# ---- left alone --------------------------------------------------------------------------------
class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(4))


def test_iterable_datasets_and_plain_iterables_are_returned_unchanged():
    stream = DataLoader(Stream(), batch_size=2)
    strategy = strategy_for(1)
    assert strategy.process_dataloader(stream, train=True, seed=1234) is stream
    batches = [torch.ones(2), torch.zeros(2)]
    assert strategy.process_dataloader(batches, train=False, seed=1234) is batches


def test_random_sampler_with_replacement_keeps_its_own_draws():
    replacement = torch.utils.data.RandomSampler(indices(20), replacement=True, num_samples=8)
    loader = DataLoader(indices(20), batch_size=4, sampler=replacement)
    sharded = strategy_for(0).process_dataloader(loader, train=True, seed=1234)
    assert isinstance(sharded.sampler, DistributedSamplerWrapper)
    assert len(sharded.sampler) == 4  # half of the 8 draws, not half of the dataset


def test_equal_length_loader_pads_shorter_shards_with_empty_batches():
    loader = DataLoader(indices(5), batch_size=2)  # batches of 2, 2, 1
    padded = EqualLengthLoader(loader, longest_of=lambda own: 5)
    batches = list(padded)
    assert len(padded) == 5 and [b[0].shape[0] for b in batches] == [2, 2, 1, 0, 0]
    assert [is_padding(b) for b in batches] == [False, False, False, True, True]
    empty_shard = DataLoader(indices(3), batch_size=2, sampler=[])  # a rank that got no sample
    assert [b[0].shape[0] for b in EqualLengthLoader(empty_shard, longest_of=lambda own: 2)] == [0, 0]
