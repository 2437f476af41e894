"""Each process's share of the arrays a user passes to ``fit``/``evaluate``/``predict``.

Process ``r`` of ``W`` takes samples ``r, r + W, r + 2W, ...`` (as torch's DistributedSampler
without shuffling). With ``batch_size=B`` per process, step ``k`` of the ``W`` processes then
reads exactly the samples one process reads at step ``k`` with batch ``W * B`` and no shuffling:
the same global batches, the last one possibly smaller. Shuffling (``shuffle=True``) is Keras'
own, within each process's share, as under Horovod.

Only arrays (NumPy, torch tensors, and lists/tuples/dicts of them) can be cut this way; a
``keras.utils.PyDataset`` and a torch DataLoader are split by batch (batches.py); other data (a
generator) is refused under several processes, with what to pass instead. Everything here is computed identically on every rank,
without a collective, so a refusal comes before any process waits on another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trainmesh.keras.batches import is_batches

_ARRAYS = (np.ndarray, torch.Tensor)


def is_arrays(value: Any) -> bool:
    """NumPy arrays or tensors, alone or nested in lists, tuples and dicts (None allowed inside)."""
    if isinstance(value, _ARRAYS):
        return True
    if isinstance(value, dict):
        return bool(value) and all(v is None or is_arrays(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return bool(value) and all(v is None or is_arrays(v) for v in value)
    return False


def leaves(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in leaves(v)]
    return [value]


def num_samples(value: Any) -> int:
    """The batch dimension shared by every array of ``value``."""
    sizes = {int(leaf.shape[0]) for leaf in leaves(value)}
    if len(sizes) != 1:
        raise ValueError(f"the arrays of x/y/sample_weight have different numbers of samples: {sorted(sizes)}")
    return sizes.pop()


def shard(value: Any, rank: int, world: int) -> Any:
    """Process ``rank``'s samples of every array in ``value`` (its structure kept)."""
    if value is None or world == 1:
        return value
    if isinstance(value, dict):
        return {key: shard(v, rank, world) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(shard(v, rank, world) for v in value)
    return value[rank::world]


def share_sizes(samples: int, world: int) -> list[int]:
    """How many samples each process holds."""
    return [len(range(rank, samples, world)) for rank in range(world)]


@dataclass(frozen=True)
class TrainPlan:
    """Every process's batch sizes, for weighting its gradient by its share of a global batch."""

    shares: tuple[int, ...]  # samples per process
    batch_size: int  # per process
    steps: int  # batches per epoch, the same on every process

    def global_batch(self, step: int) -> int:
        """Samples the processes read together at ``step`` of an epoch (only the last one can be short)."""
        return sum(max(0, min(self.batch_size, share - step * self.batch_size)) for share in self.shares)

    def uneven(self, step: int) -> bool:
        """Whether the processes' batches of ``step`` differ in size."""
        return len({max(0, min(self.batch_size, share - step * self.batch_size)) for share in self.shares}) > 1


def evaluation_plan(data: Any, world: int, batch_size: int | None, steps: Any) -> TrainPlan | None:
    """The per-process batches of an evaluation of split arrays (None: other data, or ``steps`` given).
    Processes may take different numbers of evaluation steps (no collective runs per step)."""
    if world == 1 or data is None or steps is not None or not is_arrays(data):
        return None
    batch = batch_size or 32
    shares = share_sizes(num_samples(data), world)
    return TrainPlan(tuple(shares), batch, max(math.ceil(share / batch) for share in shares))


def plan_training(samples: int, world: int, batch_size: int, steps_per_epoch: int | None) -> TrainPlan:
    """The per-process batches of a pass over the data, refused when processes would run different
    numbers of steps (each step is a collective every process must join)."""
    shares = share_sizes(samples, world)
    steps = [math.ceil(share / batch_size) for share in shares]
    full = all(share == shares[0] and share % batch_size == 0 for share in shares)
    if steps_per_epoch is not None and world > 1 and not full:
        raise ValueError(
            f"steps_per_epoch={steps_per_epoch} with {samples} training samples over {world} processes at "
            f"batch_size={batch_size}: the global batches are not all full ({samples} is not a multiple of "
            f"{world * batch_size}), and with steps_per_epoch Keras does not start each epoch at the first "
            "batch, so the processes cannot weight a short batch alike. Use a number of samples that is a multiple "
            "of the global batch, or leave steps_per_epoch out"
        )
    if len(set(steps)) != 1 or min(shares) == 0:
        remainder = samples % (world * batch_size)
        raise ValueError(
            f"{samples} training samples over {world} processes at batch_size={batch_size} per process give "
            f"process 0 {steps[0]} batches but process {world - 1} {steps[-1]}: the last global batch has "
            f"{remainder} samples, fewer than the {world} processes, and every process must take the same "
            f"number of steps. Drop {remainder} samples, or use a batch size that leaves none or at least {world}"
        )
    return TrainPlan(tuple(shares), batch_size, steps[0])


def check_evaluation_size(samples: int, world: int, what: str) -> None:
    if samples < world:
        raise ValueError(
            f"{what} has {samples} samples, fewer than the {world} processes: each process evaluates its share, "
            "and one would have none. Use more samples or fewer processes"
        )


def refuse_unshardable(name: str, value: Any, world: int, batches: bool = False) -> None:
    """Under several processes, only arrays (and, where ``batches``, a PyDataset or a DataLoader:
    batches.py) can be split; a generator's batches exist only by running it in each process."""
    if world > 1 and value is not None and not is_arrays(value) and not (batches and is_batches(value)):
        also = ", a keras.utils.PyDataset or a torch DataLoader" if batches else ""
        raise TypeError(
            f"{name} of type {type(value).__name__} cannot be split over {world} processes: trainmesh.keras gives "
            f"each process its share of NumPy arrays or torch tensors (or lists/dicts of them){also}; a generator "
            "yields its batches only when run, in each process alike. Pass the data as one of those, or run on one "
            "process (devices=1), where any data Keras reads is passed to model.fit as is"
        )


def interleave(parts: list[Any]) -> Any:
    """The inverse of :func:`shard`: per-process outputs back in sample order."""
    first = parts[0]
    if isinstance(first, dict):
        return {key: interleave([part[key] for part in parts]) for key in first}
    if isinstance(first, (list, tuple)):
        return type(first)(interleave([part[i] for part in parts]) for i in range(len(first)))
    arrays = [np.asarray(part) for part in parts]
    total = sum(len(array) for array in arrays)
    out = np.empty((total, *arrays[0].shape[1:]), dtype=arrays[0].dtype)
    for rank, array in enumerate(arrays):
        out[rank :: len(arrays)] = array
    return out


def concatenate(parts: list[Any]) -> Any:
    """Per-process outputs of contiguous runs of the data, one after another (rank order)."""
    first = parts[0]
    if isinstance(first, dict):
        return {key: concatenate([part[key] for part in parts]) for key in first}
    if isinstance(first, (list, tuple)):
        return type(first)(concatenate([part[i] for part in parts]) for i in range(len(first)))
    return np.concatenate([np.asarray(part) for part in parts])
