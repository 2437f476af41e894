"""What ``fit``/``evaluate``/``predict`` accept as data, as a torch DataLoader.

- NumPy arrays (or tensors) ``x`` and ``y``: a TensorDataset, batched by ``batch_size``;
  floating arrays become Keras' float type (float32), integer labels int64;
- a torch ``Dataset`` of ``(x, y)`` samples: batched by ``batch_size``;
- a torch ``DataLoader``: used as it is (its own batch size);
- a ``keras.utils.PyDataset``: each of its batches is one batch (its own batch size).

In every case the Trainer then adds a distributed sampler under several processes, so each
process reads its share of the batches: ``batch_size`` is the per-process batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from trainmesh.keras.backend import is_keras_object


def as_tensor(array: Any) -> torch.Tensor:
    """A NumPy array or tensor as a tensor: floating ones in float32 (Keras' floatx), integers in int64."""
    tensor = array if isinstance(array, torch.Tensor) else torch.as_tensor(np.asarray(array))
    if tensor.is_floating_point():
        return tensor.to(torch.float32)
    if tensor.dtype in (torch.int8, torch.int16, torch.int32, torch.uint8):
        return tensor.to(torch.int64)
    return tensor


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, torch.Tensor, list))


class PyDatasetBatches(Dataset):
    """A ``keras.utils.PyDataset`` as a map-style dataset whose items are its batches."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> Any:
        batch = self.source[index]
        if isinstance(batch, (tuple, list)):
            return tuple(as_tensor(part) for part in batch)
        return (as_tensor(batch),)


def first_item(items: list[Any]) -> Any:
    """The collate function of a loader whose items are already batches (batch_size=1)."""
    return items[0]


def to_loader(x: Any, y: Any = None, *, batch_size: int, shuffle: bool, what: str = "x") -> DataLoader:
    """A DataLoader over ``x`` (and ``y``)."""
    if x is None:
        raise ValueError(
            f"{what} is None: pass NumPy arrays (x, y), a torch Dataset or DataLoader, or a keras.utils.PyDataset"
        )
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer (the per-process batch), got {batch_size!r}")
    loader_like = isinstance(x, (DataLoader, Dataset)) or is_keras_object(x)
    if loader_like and y is not None:
        raise ValueError(f"y was given with {what} of type {type(x).__name__}, which holds its targets already: drop y")
    if isinstance(x, DataLoader):
        return x
    if is_keras_object(x):  # a keras.utils.PyDataset: it batches itself
        if not hasattr(x, "__getitem__") or not hasattr(x, "__len__"):
            raise TypeError(f"{type(x).__name__} is not a keras.utils.PyDataset (with __len__ and __getitem__)")
        return DataLoader(PyDatasetBatches(x), batch_size=1, shuffle=shuffle, collate_fn=first_item)
    if isinstance(x, Dataset):
        return DataLoader(x, batch_size=batch_size, shuffle=shuffle)
    if not _is_array(x) or (y is not None and not _is_array(y)):
        raise TypeError(
            f"{what} of type {type(x).__name__} (y: {type(y).__name__}) is not data trainmesh.keras reads: pass NumPy "
            "arrays (x, y), a torch Dataset or DataLoader, or a keras.utils.PyDataset (dicts of arrays for "
            "multi-input models: wrap them in a torch Dataset)"
        )
    tensors = [as_tensor(x)] + ([] if y is None else [as_tensor(y)])
    if y is not None and len(tensors[0]) != len(tensors[1]):
        raise ValueError(f"x has {len(tensors[0])} samples but y has {len(tensors[1])}; they must match")
    return DataLoader(TensorDataset(*tensors), batch_size=batch_size, shuffle=shuffle)


def validation_loader(validation_data: Any, *, batch_size: int) -> DataLoader | None:
    """``validation_data`` as Keras takes it: ``(x_val, y_val)``, a Dataset, DataLoader or PyDataset."""
    if validation_data is None:
        return None
    if isinstance(validation_data, tuple):
        if len(validation_data) != 2:
            raise ValueError(
                f"validation_data=(x_val, y_val) has {len(validation_data)} elements; sample weights "
                "(a third) are not supported"
            )
        return to_loader(*validation_data, batch_size=batch_size, shuffle=False, what="validation_data")
    return to_loader(validation_data, batch_size=batch_size, shuffle=False, what="validation_data")
