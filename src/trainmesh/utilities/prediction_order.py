"""Predictions of the ranks' unpadded shares put back in the loader's order.

Under several processes each predict loader is split as Lightning's Trainer splits it
(``UnrepeatedDistributedSampler``): rank r of W reads positions r, r+W, r+2W, ... of the loader's
order, batched at the loader's batch size. One process's predictions are recovered by cutting each
rank's outputs into one row per sample, dealing the rows back to their positions and batching
them again at the loader's batch size: the batches one process makes, each row computed in the
batch its rank read.

>>> import torch
>>> parts = [[torch.tensor([0, 2]), torch.tensor([4])], [torch.tensor([1, 3])]]
>>> in_loader_order(parts, [[2, 1], [2]], batch_size=2)
[tensor([0, 1]), tensor([2, 3]), tensor([4])]
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch

from trainmesh.utilities.collections import apply_to_tensors


def in_loader_order(parts: list[list[Any]], rows: list[list[int] | None], batch_size: int | None) -> list[Any] | None:
    """Each rank's outputs (``parts[r]``) in the order of the positions it read, batched at
    ``batch_size`` (None: an unbatched loader, one sample an output). ``rows[r]`` are the sample
    counts of rank r's batches. None where an output is not cut into rows: not a tensor, or a
    dict, list or tuple of tensors, each with one row per sample of its batch."""
    if batch_size is None:
        return _dealt(parts)
    samples = []
    for outputs, counts in zip(parts, rows, strict=True):
        assert counts is not None, "a batched loader's shares record their batches' sizes"
        cut = [_rows_of(output, count) for output, count in zip(outputs, counts, strict=False)]
        if any(pieces is None for pieces in cut):
            return None
        samples.append([row for pieces in cut for row in pieces or ()])
    ordered = _dealt(samples)
    return [_joined(ordered[start : start + batch_size]) for start in range(0, len(ordered), batch_size)]


def _dealt(parts: list[list[Any]]) -> list[Any]:
    """Rank r's k-th item at position k*W + r: the items back in the order they were dealt."""
    turns = max((len(part) for part in parts), default=0)
    return [part[turn] for turn in range(turns) for part in parts if turn < len(part)]


def _rows_of(output: Any, count: int) -> list[Any] | None:
    if not _cuts_into(output, count):
        return None
    return [apply_to_tensors(output, functools.partial(_row, index=i)) for i in range(count)]


def _row(tensor: torch.Tensor, *, index: int) -> torch.Tensor:
    return tensor[index : index + 1]


def _cuts_into(output: Any, count: int) -> bool:
    """Whether every leaf of ``output`` is a tensor with ``count`` rows (and there is one)."""
    if isinstance(output, torch.Tensor):
        return output.dim() > 0 and output.shape[0] == count
    if isinstance(output, Mapping):
        values = list(output.values())
    elif isinstance(output, (list, tuple)):
        values = list(output)
    else:
        return False
    return bool(values) and all(_cuts_into(value, count) for value in values)


def _joined(rows: list[Any]) -> Any:
    """One output of the structure of ``rows[0]``, each tensor the rows' tensors concatenated."""
    leaves: list[list[torch.Tensor]] = []
    for row in rows:
        found: list[torch.Tensor] = []
        apply_to_tensors(row, found.append)
        leaves.append(found)
    columns = iter([torch.cat(column) for column in zip(*leaves, strict=True)])
    return apply_to_tensors(rows[0], lambda _: next(columns))
