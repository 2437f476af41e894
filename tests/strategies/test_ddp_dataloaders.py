"""DDPStrategy.process_dataloader without a process group: the strategy is given its place in
the run directly, as the launcher would, and each rank's view is built in this one process."""

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    Sampler,
    SequentialSampler,
    TensorDataset,
    WeightedRandomSampler,
)

from trainmesh.precision import Precision
from trainmesh.strategies.ddp import DDPStrategy
from trainmesh.strategies.mesh import ParallelMesh
from trainmesh.strategies.protocol import Placement
from trainmesh.utilities.distributed_samplers import DistributedSamplerWrapper, UnrepeatedDistributedSampler


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


# ---- evaluation: what Lightning 2.6's Trainer gives each rank --------------------------------
class EveryThirdFirst(Sampler[int]):
    """A sampler of one's own: 0, 3, 6, ..., then 1, 4, ..., then 2, 5, ...; 30 of the 31 samples."""

    def __iter__(self):
        return iter([i for start in range(3) for i in range(start, 30, 3)])

    def __len__(self):
        return 30


class OwnBatches(BatchSampler):
    """A batch sampler class of one's own that follows BatchSampler's __init__."""


class NoSizes(Sampler[list[int]]):
    """A batch sampler with neither batch_size nor drop_last: nothing to make it again with."""

    def __iter__(self):
        return iter([[0, 1], [2, 3]])

    def __len__(self):
        return 2


EVALUATION_LOADERS = {
    "100_at_16": lambda: DataLoader(indices(100), batch_size=16),
    "101_at_16": lambda: DataLoader(indices(101), batch_size=16),  # 101 % 2: Lightning repeats sample 0
    "drop_last": lambda: DataLoader(indices(101), batch_size=16, drop_last=True),
    "shuffled": lambda: DataLoader(indices(37), batch_size=4, shuffle=True),
    "own_sampler": lambda: DataLoader(indices(31), batch_size=4, sampler=EveryThirdFirst()),
    "unbatched": lambda: DataLoader(indices(7), batch_size=None),
    "own_batch_sampler": lambda: DataLoader(
        indices(21), batch_sampler=OwnBatches(SequentialSampler(range(21)), 4, False)
    ),
    "33_at_16": lambda: DataLoader(indices(33), batch_size=16),  # predict: rank 0 a batch more
    "one_sample": lambda: DataLoader(indices(1), batch_size=4),
}


def lightning_batches(make, rank: int, world: int, mode: str) -> list[list[int]]:
    """What Lightning 2.6's Trainer makes of the loader for rank ``rank`` (its own functions:
    data_connector._get_distributed_sampler, utilities.data._update_dataloader), read."""
    pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.trainer.connectors.data_connector import _get_distributed_sampler
    from lightning.pytorch.trainer.states import RunningStage
    from lightning.pytorch.utilities.data import _is_dataloader_shuffled, _update_dataloader

    stage = RunningStage.PREDICTING if mode == "predict" else RunningStage.VALIDATING
    loader = make()
    sampler = _get_distributed_sampler(
        loader, _is_dataloader_shuffled(loader), overfit_batches=0, mode=stage, num_replicas=world, rank=rank, seed=0
    )
    torch.manual_seed(0)  # a RandomSampler under predict's wrapper draws its order from torch's generator
    return [batch[0].reshape(-1).tolist() for batch in _update_dataloader(loader, sampler, mode=stage)]


def our_batches(make, rank: int, world: int, mode: str) -> list[list[int]]:
    shard = strategy_for(rank, world).process_dataloader(make(), train=False, seed=0, predict=mode == "predict")
    torch.manual_seed(0)
    return [batch[0].reshape(-1).tolist() for batch in shard]


# Not one sample to predict on 2 ranks: Lightning's predict sampler asserts (test_what_lightning_s_ranks_read)
@pytest.mark.parametrize(
    ("case", "mode"),
    [
        (case, mode)
        for mode in ("validate", "predict")
        for case in EVALUATION_LOADERS
        if (case, mode) != ("one_sample", "predict")
    ],
)
def test_each_rank_reads_the_batches_lightning_s_rank_reads(case, mode):
    make = EVALUATION_LOADERS[case]
    for world in (2, 3):
        for rank in range(world):
            assert our_batches(make, rank, world, mode) == lightning_batches(make, rank, world, mode), (world, rank)


def test_what_lightning_s_ranks_read():
    """The owner's shares, as measured: validation pads by repeating the first samples (no rank's
    batch is empty), predict does not and stops a rank a batch short."""
    assert lightning_batches(EVALUATION_LOADERS["100_at_16"], 1, 2, "validate") == [
        list(range(1, 32, 2)),
        list(range(33, 64, 2)),
        list(range(65, 96, 2)),
        [97, 99],
    ]
    assert lightning_batches(EVALUATION_LOADERS["101_at_16"], 1, 2, "validate")[-1] == [97, 99, 0]
    assert lightning_batches(EVALUATION_LOADERS["one_sample"], 1, 2, "validate") == [[0]]
    assert [len(b) for b in lightning_batches(EVALUATION_LOADERS["33_at_16"], 0, 2, "predict")] == [16, 1]
    assert [len(b) for b in lightning_batches(EVALUATION_LOADERS["33_at_16"], 1, 2, "predict")] == [16]
    with pytest.raises(AssertionError):  # UnrepeatedDistributedSampler: a rank with no sample at all
        lightning_batches(EVALUATION_LOADERS["one_sample"], 1, 2, "predict")
    # trainmesh predicts there (under ddp: test_ddp.py), rank 1 reading nothing
    assert our_batches(EVALUATION_LOADERS["one_sample"], 1, 2, "predict") == []


def test_a_batch_sampler_that_cannot_be_made_again_is_refused_as_lightning_refuses_it():
    make = lambda: DataLoader(indices(4), batch_sampler=NoSizes())  # noqa: E731
    with pytest.raises(TypeError, match="can't inject a \\(distributed\\) sampler"):
        lightning_batches(make, 0, 2, "validate")
    with pytest.raises(TypeError, match="NoSizes has no batch_size and drop_last.*use_distributed_sampler=False"):
        our_batches(make, 0, 2, "validate")


def test_evaluation_shares_are_distributed_samplers_and_leave_the_user_s_loader_alone():
    loader = DataLoader(indices(101), batch_size=16)
    shard = strategy_for(1).process_dataloader(loader, train=False, seed=0)
    assert type(shard.sampler) is DistributedSampler and shard.sampler.shuffle is False and len(shard) == 4
    predicted = strategy_for(1).process_dataloader(loader, train=False, seed=0, predict=True)
    assert type(predicted.sampler) is UnrepeatedDistributedSampler and len(predicted.sampler) == 50
    assert seen(loader) == list(range(101)) and type(loader.sampler) is SequentialSampler


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
