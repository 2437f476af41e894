"""How trainmesh.keras splits a torch DataLoader over processes, without starting any: a training
loader by sample with no sample repeated (as one process reads each once), refused when the processes
would take different numbers of steps; Keras' own refusal of validation_split with one, said first."""

import os

os.environ["KERAS_BACKEND"] = "torch"

import pytest  # noqa: E402
import torch  # noqa: E402

import keras  # noqa: E402
import trainmesh.keras as tk  # noqa: E402
from trainmesh.keras.batches import SampleShard  # noqa: E402


def loader(samples: int, batch: int, **kwargs):
    numbers = torch.arange(samples, dtype=torch.float32).reshape(samples, 1)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(numbers, numbers), batch_size=batch, **kwargs)


def model():
    keras.backend.clear_session(free_memory=False)  # no gc.collect: it scans the whole heap of this process
    built = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    built.compile(optimizer="sgd", loss="mse")
    return built


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_training_loader_is_split_by_sample_without_repeating_one(shuffle):
    """101 samples over 2 processes: 51 and 50, every sample once (torch's DistributedSampler gives 51 and
    51, sample 0 twice); unshuffled, rank r reads r, r + 2, ...; shuffled, rank r reads samples r, r + 2,
    ... of the permutation torch's RandomSampler (one process's shuffle) draws from the same generator
    state (before: DistributedSampler's seed + epoch, another permutation), another the next epoch."""
    from torch.utils.data import RandomSampler

    shards = [SampleShard(101, num_replicas=2, rank=r, shuffle=shuffle) for r in range(2)]
    epochs = []
    torch.manual_seed(3)
    for _ in (0, 1):
        state = torch.get_rng_state()
        one_process = list(RandomSampler(range(101)))
        parts = []
        for shard in shards:  # every process starts the epoch from the generator state one process has
            torch.set_rng_state(state)
            parts.append(list(shard))
        assert [len(part) for part in parts] == [len(shard) for shard in shards] == [51, 50]
        assert sorted(parts[0] + parts[1]) == list(range(101))
        order = one_process if shuffle else list(range(101))
        assert parts == [order[0::2], order[1::2]]
        epochs.append(parts)
    assert (epochs[0] != epochs[1]) == shuffle


def test_refused_before_any_process_starts(monkeypatch):
    """A DataLoader whose processes would read different numbers of batches (97 samples in batches of 16:
    49 and 48 samples, 4 and 3 batches), validation or evaluation data of fewer batches than processes,
    and validation_split with a DataLoader (Keras refuses it on one process too): refused in the calling
    process, with what to do instead."""
    from trainmesh.runtime import Runtime

    monkeypatch.setattr(Runtime, "launch", lambda *a, **k: pytest.fail("a process was started"))
    with pytest.raises(ValueError, match="97 samples in batches of 16.*process 0 4 batches but process 1 3"):
        tk.fit(model(), loader(97, 16), strategy="ddp", devices=2)
    with pytest.raises(ValueError, match="validation_split=0.2 with x a DataLoader.*Pass .* validation_data="):
        tk.fit(model(), loader(96, 16), validation_split=0.2, strategy="ddp", devices=2)
    one_batch = loader(8, 8)  # before: rank 1 validated nothing and the run hung (killed after 120 s)
    with pytest.raises(ValueError, match="validation_data has 1 batches, fewer than the 2 processes.*one would have"):
        tk.fit(model(), loader(96, 16), validation_data=one_batch, strategy="ddp", devices=2)
    with pytest.raises(ValueError, match="x has 1 batches, fewer than the 2 processes"):
        tk.evaluate(model(), one_batch, strategy="ddp", devices=2)
    with pytest.raises(ValueError, match="validation_split"):  # Keras' own refusal, on one process
        model().fit(loader(96, 16), validation_split=0.2, verbose=0)


def test_loaders_that_split_evenly_are_accepted():
    """101 samples in batches of 16 (4 and 4 batches), and 97 with drop_last (3 and 3): no refusal."""
    from trainmesh.keras.batches import check_batches

    check_batches("x", loader(101, 16), 2, train=True)
    check_batches("x", loader(97, 16, drop_last=True), 2, train=True)
    check_batches("x", loader(97, 16), 2, train=False)  # evaluation: any number of batches


class Runtime:
    """One rank of two, every rank drawing alike: rank 0's generator state is each one's."""

    def __init__(self, rank):
        self.global_rank, self.world_size = rank, 2

    def broadcast(self, value, src):
        return value


def seeded():
    generator = torch.Generator()
    generator.manual_seed(3)
    return generator


def test_a_shuffled_loader_with_a_generator_of_its_own_is_split_by_the_permutation_it_draws():
    """DataLoader(shuffle=True, generator=g): RandomSampler permutes with g (read to the end, as here: twice
    per epoch, its remainder's randperm too). Before, g was ignored (the loader padded and shuffled from
    torch's generator). Now each rank reads its samples of the permutation one process draws from g,
    each epoch, and g ends where one process's does."""
    from trainmesh.keras.batches import is_split_by_sample, split_batches

    one_process = loader(40, 8, shuffle=True, generator=seeded())
    assert not is_split_by_sample(one_process)  # read through OwnSamplerShard
    shards = [split_batches(loader(40, 4, shuffle=True, generator=seeded()), Runtime(r), train=True) for r in (0, 1)]
    for _ in (0, 1):
        order = [int(i) for batch in one_process for i in batch[0][:, 0]]
        parts = [[int(i) for batch in shard for i in batch[0][:, 0]] for shard in shards]
        assert parts == [order[0::2], order[1::2]]
    assert all(torch.equal(s.generator.get_state(), one_process.generator.get_state()) for s in shards)


@pytest.mark.parametrize(("samples", "drop_last"), [(40, False), (46, False), (47, False), (46, True)])
def test_a_loader_with_a_generator_read_as_keras_fit_reads_it_moves_g_as_one_process(samples, drop_last):
    """Keras' fit peeks one batch, then reads len(loader) batches per epoch and no more, so RandomSampler's
    lazy remainder randperm is drawn only when the last batch is partial (47 = 5 x 8 + 7: rank 0's last
    batch of 4 is full, one process's of 8 is not). Before, the split drew it every epoch and at the peek:
    each epoch after the first read another permutation than one process (the user's loader_restore
    program: weights 4.4e-2 from Keras' fit at 32, silently)."""
    import itertools

    from trainmesh.keras.batches import split_batches

    def as_keras_reads(reader, epochs=3):
        firsts = [int(i) for i in next(iter(reader))[0][:, 0]]
        return [firsts] + [
            [int(i) for batch in itertools.islice(reader, len(reader)) for i in batch[0][:, 0]] for _ in range(epochs)
        ]

    one = loader(samples, 8, shuffle=True, generator=seeded(), drop_last=drop_last)
    shards = [
        split_batches(loader(samples, 4, shuffle=True, generator=seeded(), drop_last=drop_last), Runtime(r), train=True)
        for r in (0, 1)
    ]
    reads = [as_keras_reads(shard) for shard in shards]
    for epoch, order in enumerate(as_keras_reads(one)):
        merged = [reads[0][epoch], reads[1][epoch]]
        width = min(len(order), 8) if epoch == 0 else len(order)
        assert merged == [order[:width][0::2], order[:width][1::2]], epoch
    assert all(torch.equal(s.generator.get_state(), one.generator.get_state()) for s in shards)


class Drawn(torch.utils.data.Sampler):
    """A sampler of a user's own: each index drawn from its own generator as it is read."""

    def __init__(self, samples):
        self.samples, self.generator = samples, seeded()

    def __iter__(self):
        for _ in range(self.samples):
            yield int(torch.randint(self.samples, (), generator=self.generator))

    def __len__(self):
        return self.samples


@pytest.mark.parametrize(("samples", "drop_last"), [(40, False), (37, False), (37, True)])
def test_a_sampler_of_the_user_s_own_is_read_as_one_process_reads_it(samples, drop_last):
    """Keras' fit peeks one batch, then reads len(loader) batches per epoch. Each rank reads its positions of
    every global batch of the order one process's sampler draws, pulled as one process pulls it, no index
    repeated. Before, torch's DistributedSampler recipe read the whole sampler at once and padded the shares
    (37: the first index read twice; a user's program of 337 samples 1.8e-2 from Keras' fit at 32, silently)."""
    import itertools

    from trainmesh.keras.batches import split_batches

    def reads(reader, epochs=2):
        first = [int(i) for i in next(iter(reader))[0][:, 0]]
        rest = [
            [int(i) for batch in itertools.islice(reader, len(reader)) for i in batch[0][:, 0]] for _ in range(epochs)
        ]
        return [first, *rest]

    one = loader(samples, 8, sampler=Drawn(samples), drop_last=drop_last)
    shards = [
        split_batches(loader(samples, 4, sampler=Drawn(samples), drop_last=drop_last), Runtime(r), train=True)
        for r in (0, 1)
    ]
    ranks = [reads(shard) for shard in shards]
    for epoch, order in enumerate(reads(one)):
        width = min(len(order), 8) if epoch == 0 else len(order)
        assert [ranks[0][epoch], ranks[1][epoch]] == [order[:width][0::2], order[:width][1::2]], epoch
    assert all(torch.equal(s.sampler.sampler.generator.get_state(), one.sampler.generator.get_state()) for s in shards)


class Unseeded(torch.utils.data.Sampler):
    """A sampler of a user's own shuffling with numpy's global generator, which the program never seeds."""

    def __init__(self, samples):
        self.samples = samples

    def __iter__(self):
        import numpy as np

        return iter(np.random.permutation(self.samples).tolist())

    def __len__(self):
        return self.samples


class Broadcasting(Runtime):
    """One rank of two whose broadcasts give rank 0's values (rank 0 runs first and records them)."""

    def __init__(self, rank, sent):
        super().__init__(rank)
        self.sent = sent

    def broadcast(self, value, src):
        if self.global_rank == 0:
            self.sent.append(value)
            return value
        return self.sent.pop(0)


def test_a_sampler_drawing_apart_in_each_process_deals_out_rank_0_s_order():
    """A sampler drawing from numpy's generator, seeded otherwise in each process (unseeded: from the OS):
    each process takes its positions of rank 0's global batches, so every epoch reads each sample once.
    Before, each took its positions of its own order: under ddp at 2 x 16 an unseeded np.random.permutation
    over 320 samples read 73-85 of them twice each epoch, and missed as many, silently."""
    import numpy as np

    from trainmesh.keras.batches import split_batches

    sent = []
    reads = []
    for r in (0, 1):
        np.random.seed(r)
        shard = split_batches(loader(37, 4, sampler=Unseeded(37)), Broadcasting(r, sent), train=True)
        reads.append([[int(i) for batch in shard for i in batch[0][:, 0]] for _ in (0, 1)])
    for epoch in (0, 1):
        assert sorted(reads[0][epoch] + reads[1][epoch]) == list(range(37)), epoch
    assert reads[0][0] != reads[0][1] and not sent
