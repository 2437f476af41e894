"""Lightning's ``lightning.pytorch.utilities.data`` functions a program calls on its own batches and
loaders: the batch size ``self.log`` would infer, a loader's length if it has one, and whether its
dataset is iterable."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import IterableDataset

from trainmesh.utilities.exceptions import MisconfigurationException
from trainmesh.utilities.rank_zero import rank_zero_warn

__all__ = ["extract_batch_size", "has_iterable_dataset", "has_len_all_ranks", "sized_len"]

_CANNOT_INFER = (
    "We could not infer the batch_size from the batch. Either simplify its structure"
    " or provide the batch_size as `self.log(..., batch_size=batch_size)`."
)


def extract_batch_size(batch: Any) -> int:
    """The size of dim 0 of the first tensor found in ``batch`` (a 0-d tensor counts 1), searching
    mappings' values, other iterables and a dataclass's fields in order, as Lightning does; warns
    when a later tensor disagrees.

    Args:
        batch: a tensor, or a mapping / iterable holding tensors.

    Raises:
        MisconfigurationException: ``batch`` holds no tensor.

    Examples:
        >>> extract_batch_size({"x": torch.zeros(4, 3), "y": torch.zeros(4)})
        4
    """
    found = None
    try:
        for size in _sizes(batch):
            if found is None:
                found = size
            elif size != found:
                warnings.warn(
                    "Trying to infer the `batch_size` from an ambiguous collection. The batch size we"
                    f" found is {found}. To avoid any miscalculations, use `self.log(..., batch_size=batch_size)`.",
                    stacklevel=2,
                )
                break
    except RecursionError as error:
        raise RecursionError(_CANNOT_INFER) from error
    if found is None:
        raise MisconfigurationException(_CANNOT_INFER)
    return found


def _sizes(batch: Any) -> Iterator[int]:
    if isinstance(batch, torch.Tensor):
        yield 1 if batch.ndim == 0 else batch.size(0)
    elif isinstance(batch, (Iterable, Mapping)) and not isinstance(batch, str):
        for item in batch.values() if isinstance(batch, Mapping) else batch:
            yield from _sizes(item)
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):  # its fields in order, as Lightning's
        for field in dataclasses.fields(batch):
            yield from _sizes(getattr(batch, field.name))


def sized_len(dataloader: object) -> int | None:
    """``len(dataloader)``, or None where it has no length."""
    try:
        return len(dataloader)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return None


def has_iterable_dataset(dataloader: object) -> bool:
    """Whether ``dataloader``'s dataset is an ``IterableDataset``."""
    return isinstance(getattr(dataloader, "dataset", None), IterableDataset)


def has_len_all_ranks(
    dataloader: object, strategy: Any, allow_zero_length_dataloader_with_multiple_devices: bool = False
) -> bool:
    """Whether ``dataloader`` has a length, with Lightning's checks across the ranks: a loader empty
    on every rank warns; empty on this rank only raises (or warns, when allowed).

    Args:
        dataloader: the loader.
        strategy: the run's strategy (``trainer.strategy``); its ``reduce`` sums the lengths.
        allow_zero_length_dataloader_with_multiple_devices: warn instead of raising for a rank's empty loader.
    """
    local = sized_len(dataloader)
    if local is None:
        return False
    total = int(strategy.reduce(torch.tensor(local), reduce_op="sum"))
    name = type(dataloader).__name__
    if total == 0:
        rank_zero_warn(f"Total length of `{name}` across ranks is zero. Please make sure this was your intention.")
    if total > 0 and local == 0:
        if not allow_zero_length_dataloader_with_multiple_devices:
            raise RuntimeError(
                f"`{name}` within local rank has zero length. Please make sure that it returns at least 1 batch."
            )
        rank_zero_warn(
            f"Total length of `{name}` across ranks is zero, but local rank has zero length."
            " Please be cautious of uneven batch length."
        )
    if has_iterable_dataset(dataloader):
        rank_zero_warn(
            "Your `IterableDataset` has `__len__` defined. In combination with multi-process data loading"
            " (when num_workers > 1), `__len__` could be inaccurate if each worker is not configured"
            " independently to avoid having duplicate data."
        )
    return True
