"""Each process's share of a ``keras.utils.PyDataset`` or a torch ``DataLoader`` given to ``fit``.

A PyDataset is split by batch: process ``r`` of ``W`` reads batches ``r, r + W, r + 2W, ...``
(to predict: a contiguous run of them, so that the outputs concatenate in the data's order)
(its ``__getitem__`` indices). Unshuffled, step ``k`` of the ``W`` processes reads batches
``kW .. kW + W - 1``: with batches of ``B`` samples, the samples one process reads at step ``k``
of the same data in batches of ``W * B``. For training the number of batches must be a multiple
of ``W`` (each step is a collective every process joins); validation takes any number (its
metrics are summed once, at its end).

A DataLoader is rebuilt as the trainmesh Trainer rebuilds one (``strategies/sampling.py``): for
training, a ``DistributedSampler`` (every rank the same number of batches; a ``RandomSampler``
becomes ``DistributedSampler(shuffle=True)`` with one seed drawn on rank 0, reshuffled at each
epoch's beginning); for validation, each rank a contiguous run of the loader's batches, every
sample once.

Batch sizes are not known before the batches are read, so the gradients of these runs are
weighted by the batch sizes each step actually has (sync.py). A generator (or any other
iterable) is refused under several processes: its batches exist only by running it, in each
process, and nothing tells one process's from another's.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset

from trainmesh.keras.backend import require_keras
from trainmesh.runtime import Runtime
from trainmesh.utilities.dataloaders import replace_batch_sampler
from trainmesh.utilities.distributed_samplers import ContiguousBatchShard, shard_bounds


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


def split_batches(value: Any, runtime: Runtime, *, train: bool) -> Any:
    """This process's share of a PyDataset or a DataLoader (see the module's docstring)."""
    rank, world = runtime.global_rank, runtime.world_size
    if world == 1:
        return value
    if is_py_dataset(value):
        return _rank_batches()(value, range(rank, value.num_batches, world))
    if not train:
        return replace_batch_sampler(value, ContiguousBatchShard(value.batch_sampler, num_replicas=world, rank=rank))
    from trainmesh.strategies.sampling import shard_dataloader

    seed = runtime.broadcast(int(torch.randint(0, 2**31 - 1, ()).item()), 0)  # torch's generator: the user's seed

    def longest(count: int) -> int:  # only evaluation shards pad to the longest
        return count

    return shard_dataloader(value, dp_rank=rank, dp_size=world, train=True, seed=seed, longest=longest)


def split_for_prediction(value: Any, runtime: Runtime) -> Any:
    """This process's contiguous run of the batches of a PyDataset or a DataLoader: the processes'
    predictions, one after another in rank order, are in the order of the data."""
    rank, world = runtime.global_rank, runtime.world_size
    if world == 1:
        return value
    if is_py_dataset(value):
        return _rank_batches()(value, range(*shard_bounds(value.num_batches, world, rank)))
    return split_batches(value, runtime, train=False)  # a DataLoader's evaluation shard is contiguous


def check_prediction_batches(value: Any, world: int) -> None:
    """Each process must have at least one batch to predict (Keras refuses an empty input)."""
    check_batches("x", value, world, train=False)
    count = value.num_batches if is_py_dataset(value) else len(value)
    if count < world:
        raise ValueError(
            f"x has {count} batches, fewer than the {world} processes: each process predicts a run of the "
            "batches, and one would have none. Use smaller batches, or fewer processes"
        )


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
