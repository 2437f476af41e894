"""Each process's share of a ``keras.utils.PyDataset`` or a torch ``DataLoader`` given to ``fit``.

The reference is Keras' own call on one process with the same data in batches ``W`` times as large:
``W`` processes read, at each step, the samples that one process reads at that step.

A PyDataset is split by batch: process ``r`` of ``W`` reads batches ``r, r + W, r + 2W, ...``
(its ``__getitem__`` indices). Unshuffled, step ``k`` of the ``W`` processes reads batches
``kW .. kW + W - 1``: with batches of ``B`` samples, the samples one process reads at step ``k``
of the same data in batches of ``W * B``. For training the number of batches must be a multiple
of ``W`` (each step is a collective every process joins); validation takes any number, at least
``W`` (its metrics are summed once, at its end).

A DataLoader is split the same way. For training, process ``r`` reads samples ``r, r + W, ...``
of the loader's order (when it shuffles: of the permutation one process draws, drawn anew each
epoch as torch's RandomSampler draws it, with rank 0's seed), in batches of its ``batch_size``, without the padding of torch's
``DistributedSampler`` (which repeats samples to even the shares: one process reads each sample
once); the processes must then have as many batches each, or the run is refused. A sampler of
the user's own (weighted, a subset, a class of its own) is read as one process reads it, one global
batch at a time, and process ``r`` takes rank 0's global batch's positions ``r, r + W, ...`` (OwnSamplerShard).
For evaluation each process reads the loader's batches ``r, r + W, ...``, every sample once, so
that ``validation_steps``/``steps=k`` reads the loader's first ``k * W`` batches, as one process
reads its first ``k`` batches of ``W * B``.

To predict, each process predicts a contiguous run of the batches (of the first ``steps * W``
when ``steps`` is given), so that the outputs, one run after another, are in the order of the data.

Batch sizes are not known before the batches are read, so the gradients of these runs are
weighted by the batch sizes each step actually has (sync.py). A generator (or any other
iterable) is refused under several processes: its batches exist only by running it, in each
process, and nothing tells one process's from another's.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Iterator
from functools import cache
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, Sampler, SequentialSampler

from trainmesh.keras.backend import require_keras
from trainmesh.runtime import Runtime
from trainmesh.utilities.dataloaders import replace_batch_sampler
from trainmesh.utilities.distributed_samplers import ContiguousBatchShard, InterleavedBatchShard, shard_bounds


def is_py_dataset(value: Any) -> bool:
    keras = sys.modules.get("keras")  # a PyDataset exists only once Keras is imported
    return keras is not None and isinstance(value, keras.utils.PyDataset)


def is_batches(value: Any) -> bool:
    """Data this module splits: a PyDataset or a DataLoader."""
    return isinstance(value, DataLoader) or is_py_dataset(value)


def check_batches(name: str, value: Any, world: int, *, train: bool) -> None:
    """Refuse, before any process starts, what cannot be split over ``world`` processes alike."""
    if is_py_dataset(value):
        try:
            count = value.num_batches
        except NotImplementedError:  # Keras' own, where neither num_batches nor __len__ is defined
            count = None
        if count is None:
            raise ValueError(
                f"{name} is a PyDataset without a length (num_batches is None or missing): under {world} processes "
                f"process r takes batches r, r + {world}, ..., which needs the count. Give it __len__, or run on one process"
            )
        if train and count % world:
            raise ValueError(
                f"{name} has {count} batches, not a multiple of the {world} processes: process r takes batches r, "
                f"r + {world}, ..., and every process must take the same number of steps. Make the number of batches "
                f"a multiple of {world} (drop {count % world}, or change the batch size)"
            )
        _check_every_process_has_one(name, count, world, train)
        return
    dataset = value.dataset
    if isinstance(dataset, IterableDataset):
        raise TypeError(
            f"{name} is a DataLoader over an IterableDataset: its samples cannot be split by index over {world} "
            "processes. Use a map-style Dataset, a PyDataset, or arrays"
        )
    if value.batch_sampler is not None and type(value.batch_sampler) is not BatchSampler:
        raise ValueError(
            f"{name} uses a custom batch_sampler ({type(value.batch_sampler).__name__}), which cannot be split over "
            f"{world} processes. Use sampler= with batch_size="
        )
    if value.batch_sampler is None:
        raise ValueError(f"{name} is a DataLoader without batches (batch_size=None): Keras reads batches")
    if len(dataset) < world:
        raise ValueError(f"{name} has {len(dataset)} samples, fewer than the {world} processes: one would have none")
    if train:
        _check_equal_steps(name, _sampler_length(name, value.sampler, world), value.batch_sampler, world)
    _check_every_process_has_one(name, len(value), world, train)


def _check_every_process_has_one(name: str, count: int, world: int, train: bool) -> None:
    """Evaluation and prediction deal out whole batches: each process needs one. A process with none
    would end its evaluation with no step's logs and take another path through the metric sums than
    the others (a hang: measured, a validation DataLoader of one batch under 2 processes)."""
    if not train and count < world:
        raise ValueError(
            f"{name} has {count} batches, fewer than the {world} processes: each process evaluates or predicts "
            "whole batches of it, and one would have none. Use smaller batches, or fewer processes"
        )


def is_split_by_sample(loader: DataLoader[Any]) -> bool:
    """A training DataLoader whose order is the dataset's or one plain permutation of it drawn from torch's
    generator: split by sample (SampleShard). Any other sampler, a shuffle drawing from the loader's own
    ``generator=`` included, is read as one process reads it (OwnSamplerShard)."""
    sampler: Any = loader.sampler
    if type(sampler) is SequentialSampler:
        return True
    return (
        type(sampler) is RandomSampler
        and not sampler.replacement
        and sampler._num_samples is None
        and sampler.generator is None
    )


def _sampler_length(name: str, sampler: Any, world: int) -> int:
    try:
        return len(sampler)
    except TypeError:
        raise ValueError(
            f"{name} has a sampler without a length ({type(sampler).__name__}): under {world} processes each "
            "process reads its samples of every global batch, and every process must take the same number of steps, "
            "which needs the count. Give the sampler __len__, or run on one process"
        ) from None


def _check_equal_steps(name: str, samples: int, batches: Any, world: int) -> None:
    size, drop = batches.batch_size, batches.drop_last
    shares = [len(range(rank, samples, world)) for rank in range(world)]
    counts = [share // size if drop else math.ceil(share / size) for share in shares]
    if len(set(counts)) != 1 or counts[0] == 0:
        raise ValueError(
            f"{name} has {samples} samples in batches of {size} (drop_last={drop}): over {world} processes, "
            f"process r reads samples r, r + {world}, ..., which gives process 0 {counts[0]} batches but process "
            f"{world - 1} {counts[-1]}, and every process must take the same number of steps (each is a collective). "
            f"Use a number of samples whose last global batch of {world} x {size} has none or at least {world} "
            "samples (drop a few), or another batch_size"
        )


class SampleShard(Sampler[int]):
    """Samples ``rank, rank + W, ...`` of ``0..n-1``, or, when ``shuffle``, of the permutation one process
    draws at this point: torch's ``RandomSampler`` (a DataLoader's ``shuffle=True``, Keras' own shuffle of
    arrays) draws a seed from torch's generator when its epoch's first batch is read, and permutes all
    ``n`` samples with it; every process draws as it (the generators move on alike) and takes rank 0's
    seed (``runtime``: one small broadcast per epoch). Step k of the W processes reads the samples of
    batch k of one process at W times the batch. No padding: every sample once, as one process reads them.
    A loader given a ``generator`` of the user's is read through OwnSamplerShard, its ``RandomSampler``
    pulled as one process pulls it (its lazy remainder ``randperm`` too)."""

    def __init__(self, samples: int, *, num_replicas: int, rank: int, shuffle: bool, runtime: Any = None) -> None:
        self.samples, self.num_replicas, self.rank = samples, num_replicas, rank
        self.shuffle, self.runtime, self.epoch = shuffle, runtime, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        order: Any = range(self.samples)
        if self.shuffle:  # RandomSampler's draw, the same on every rank
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
            if self.runtime is not None and self.num_replicas > 1:
                seed = self.runtime.broadcast(seed, 0)
            generator = torch.Generator()
            generator.manual_seed(seed)
            order = torch.randperm(self.samples, generator=generator).tolist()
        return iter(order[self.rank :: self.num_replicas])

    def __len__(self) -> int:
        return len(range(self.rank, self.samples, self.num_replicas))


class OwnSamplerShard(Sampler[int]):
    """This process's indices of a sampler of the program's own (``WeightedRandomSampler``, a subset, a class
    of its own drawing from its own generator), read as one process at ``W`` times the batch reads it: its
    iterator is pulled one global batch (``batch_size`` x W indices) at a time, when this process's batch
    sampler begins that batch, as one process's batch sampler pulls it, and past its end only where one
    process's would (a partial last batch); this process takes positions ``rank, rank + W, ...`` of rank 0's
    global batch (``runtime``: one small broadcast per global batch). Every process pulls its own copy of the
    sampler, so that a generator it draws from (torch's, numpy's, its own) moves on every process as on rank
    0's; the indices are rank 0's, so that a sampler drawing otherwise in each process (numpy's or Python's
    generator, unseeded; torch's, which other code draws from as many times as its process reads samples)
    still deals out one order (before: each process took its positions of its own order, and an unseeded
    ``np.random.permutation`` read 73 of 320 samples twice an epoch and missed as many, silently). No padding:
    before, torch's ``DistributedSampler`` recipe repeated the first indices to even the shares (337 samples
    at 2 x 16: a sample read twice, 1.8e-2 from Keras' fit at 32, silently)."""

    def __init__(self, sampler: Any, *, num_replicas: int, rank: int, batch_size: int, runtime: Any = None) -> None:
        self.sampler, self.num_replicas, self.rank, self.batch_size = sampler, num_replicas, rank, batch_size
        self.runtime = runtime

    def __iter__(self) -> Iterator[int]:
        order, size = iter(self.sampler), self.batch_size * self.num_replicas
        while True:
            chunk = list(itertools.islice(order, size))  # this process's copy moves as one process's
            if self.runtime is not None and self.num_replicas > 1:  # every process ends where rank 0's does
                chunk = self.runtime.broadcast(chunk, 0)
            if not chunk:
                return
            yield from chunk[self.rank :: self.num_replicas]
            if len(chunk) < size:
                return

    def __len__(self) -> int:
        return len(range(self.rank, len(self.sampler), self.num_replicas))


class BatchShuffleShard(Sampler[list[int]]):
    """This process's samples of each global batch of ``shuffle="batch"`` (Keras' torch loader keeps the
    batches in order and permutes the samples inside each: ``torch.randperm(len(batch))`` per batch):
    each process draws the permutation one process draws for the global batch (the generators move on
    alike) and takes its samples ``rank, rank + W, ...`` of it, the rows it holds of one process's batch,
    so that a batch-shaped draw (Dropout) meets the samples it meets in one process."""

    def __init__(self, samples: int, batch_size: int, *, num_replicas: int, rank: int) -> None:
        self.samples, self.batch_size, self.num_replicas, self.rank = samples, batch_size, num_replicas, rank

    def __iter__(self) -> Iterator[list[int]]:
        size = self.batch_size * self.num_replicas
        for start in range(0, self.samples, size):
            batch = range(start, min(self.samples, start + size))
            yield [batch[i] for i in torch.randperm(len(batch))][self.rank :: self.num_replicas]

    def __len__(self) -> int:
        return math.ceil(self.samples / (self.batch_size * self.num_replicas))


class _FirstBatches(Sampler[list[int]]):
    """The first ``count`` batches of a batch sampler (predict's ``steps``)."""

    def __init__(self, batches: Any, count: int) -> None:
        self.batches, self.count = batches, count

    def __iter__(self) -> Iterator[list[int]]:
        return itertools.islice(iter(self.batches), self.count)

    def __len__(self) -> int:
        return min(len(self.batches), self.count)


def split_batches(value: Any, runtime: Runtime, *, train: bool) -> Any:
    """This process's share of a PyDataset or a DataLoader (see the module's docstring)."""
    rank, world = runtime.global_rank, runtime.world_size
    if world == 1:
        return value
    if is_py_dataset(value):
        return _rank_batches()(value, range(rank, value.num_batches, world))
    if not train:  # in turn, not contiguous runs: validation_steps/steps=k reads the loader's first k * W batches
        return replace_batch_sampler(value, InterleavedBatchShard(value.batch_sampler, num_replicas=world, rank=rank))
    if is_split_by_sample(value):  # draws nothing now: a shuffle draws when its epoch begins, as one process's
        shuffle = type(value.sampler) is RandomSampler
        samples = SampleShard(len(value.dataset), num_replicas=world, rank=rank, shuffle=shuffle, runtime=runtime)
        batches = value.batch_sampler
        return replace_batch_sampler(value, BatchSampler(samples, batches.batch_size, batches.drop_last))
    size, drop_last = value.batch_sampler.batch_size, value.batch_sampler.drop_last
    own = OwnSamplerShard(value.sampler, num_replicas=world, rank=rank, batch_size=size, runtime=runtime)
    return replace_batch_sampler(value, BatchSampler(own, size, drop_last))


def shuffled_arrays(x: Any, y: Any, sample_weight: Any, kwargs: dict[str, Any], runtime: Runtime) -> Any:
    """Arrays Keras would shuffle (``shuffle=True``, ``fit``'s default, or ``shuffle="batch"``) under several
    processes: Keras' own torch loader of all the samples (``class_weight`` made sample weights, as Keras
    makes them) at this process's batch, read through a ``SampleShard`` (each epoch the permutation one
    process at ``W`` times the batch draws, this process's samples of each global batch) or, for
    ``"batch"``, a ``BatchShuffleShard``. With ``steps_per_epoch`` too: Keras then reads the loader on
    from where the last epoch stopped and makes a new one when it runs out, drawing as from its own.
    None: nothing to shuffle so."""
    rank, world = runtime.global_rank, runtime.world_size
    shuffle = kwargs.get("shuffle", True)
    if world == 1 or shuffle not in (True, "batch"):
        return None
    from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter

    batch = kwargs.get("batch_size") or 32
    adapter = ArrayDataAdapter(
        x, y, sample_weight=sample_weight, class_weight=kwargs.get("class_weight"), shuffle=shuffle, batch_size=batch
    )
    keras_loader = adapter.get_torch_dataloader()
    sampler: Sampler[list[int]]
    if shuffle == "batch":
        sampler = BatchShuffleShard(adapter._num_samples, batch, num_replicas=world, rank=rank)
    else:
        samples = SampleShard(adapter._num_samples, num_replicas=world, rank=rank, shuffle=True, runtime=runtime)
        sampler = BatchSampler(samples, batch, drop_last=False)
    return DataLoader(keras_loader.dataset, batch_sampler=sampler, collate_fn=keras_loader.collate_fn)


def split_for_prediction(value: Any, runtime: Runtime, steps: int | None) -> Any:
    """This process's contiguous run of the batches of a PyDataset or a DataLoader (of the first
    ``steps * W`` of them, where ``steps`` is given: what one process at ``W`` times the batch
    predicts in ``steps``): the processes' predictions, one after another in rank order, are in
    the order of the data."""
    rank, world = runtime.global_rank, runtime.world_size
    if world == 1:
        return value
    if is_py_dataset(value):
        count = value.num_batches if steps is None else min(value.num_batches, steps * world)
        return _rank_batches()(value, range(*shard_bounds(count, world, rank)))
    batches = value.batch_sampler if steps is None else _FirstBatches(value.batch_sampler, steps * world)
    return replace_batch_sampler(value, ContiguousBatchShard(batches, num_replicas=world, rank=rank))


def epoch_setter(value: Any) -> list[Any]:
    """For a DataLoader split by a DistributedSampler, a callback that sets its epoch when each
    epoch begins (before Keras reads the epoch's batches), as the Trainer does: a new shuffle
    each epoch, the same on every rank. Keras itself never sets it."""
    sampler: Any = getattr(value, "sampler", None) if isinstance(value, DataLoader) else None
    if sampler is None or not hasattr(sampler, "set_epoch"):
        return []
    keras = require_keras()
    return [keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs=None: sampler.set_epoch(epoch))]


@cache
def _rank_batches() -> type:
    """The PyDataset of one process's batches, made once Keras is imported (a module attribute, so
    that workers with use_multiprocessing=True unpickle it)."""
    keras = require_keras()

    class RankBatches(keras.utils.PyDataset):  # type: ignore[name-defined]
        """The batches of ``dataset`` at ``indices`` (one process's), with its worker settings."""

        def __init__(self, dataset: Any, indices: range) -> None:
            super().__init__(
                workers=dataset.workers,
                use_multiprocessing=dataset.use_multiprocessing,
                max_queue_size=dataset.max_queue_size,
            )
            self.dataset, self.indices = dataset, indices

        def __len__(self) -> int:
            return len(self.indices)

        def __getitem__(self, index: int) -> Any:
            return self.dataset[self.indices[index]]

        def on_epoch_begin(self) -> None:
            self.dataset.on_epoch_begin()

        def on_epoch_end(self) -> None:
            self.dataset.on_epoch_end()

    RankBatches.__module__, RankBatches.__qualname__ = __name__, "RankBatches"
    return RankBatches


def __getattr__(name: str) -> Any:
    if name == "RankBatches":
        return _rank_batches()
    raise AttributeError(name)
