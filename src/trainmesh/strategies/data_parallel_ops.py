"""DataParallel's arithmetic as plain functions: split a batch along dim 0, run a step per
chunk (on replicas across GPUs, or one after another on CPU), and gather the outputs.

``dp`` uses them in one process; ``ddp2`` uses them inside each node's process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from trainmesh.utilities.chunk_context import running_chunk


def split_batch(batch: Any, chunks: int) -> list[Any]:
    """``batch`` cut along dim 0 into at most ``chunks`` pieces, as DataParallel scatters.

    Tensors anywhere in tuples, lists, dicts, namedtuples and dataclasses are split; other
    values are shared by every piece. A batch smaller than ``chunks`` gives fewer pieces.

    >>> [x.shape[0] for x, _ in split_batch((torch.zeros(5, 2), "tag"), 2)]
    [3, 2]
    """
    pieces = _split(batch, chunks)
    return pieces if isinstance(pieces, list) else [batch]


def _split(data: Any, chunks: int) -> list[Any] | None:
    if isinstance(data, torch.Tensor):
        return list(data.chunk(chunks, dim=0)) if data.dim() > 0 else None
    if isinstance(data, Mapping):
        parts = {key: _split(value, chunks) for key, value in data.items()}
        return _combine(parts.values(), lambda values: type(data)(zip(parts.keys(), values)), data.values())
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        names = [f.name for f in dataclasses.fields(data)]
        parts = [_split(getattr(data, name), chunks) for name in names]
        return _combine(parts, lambda values: dataclasses.replace(data, **dict(zip(names, values))),
                        [getattr(data, name) for name in names])
    if isinstance(data, (list, tuple)):
        parts = [_split(item, chunks) for item in data]
        if isinstance(data, tuple) and hasattr(data, "_fields"):
            return _combine(parts, lambda values: type(data)(*values), data)
        return _combine(parts, lambda values: type(data)(values), data)
    return None


def _combine(parts: Any, build: Any, originals: Any) -> list[Any] | None:
    parts, originals = list(parts), list(originals)
    counts = {len(p) for p in parts if p is not None}
    if not counts:
        return None
    count = min(counts)
    return [build([p[i] if p is not None else o for p, o in zip(parts, originals)]) for i in range(count)]


def gather_outputs(outputs: Sequence[Any], device: torch.device | None = None) -> Any:
    """Merge per-chunk outputs on one device: tensors concatenated along dim 0, 0-dim tensors
    (a loss) stacked into a vector with one entry per chunk, dicts merged key by key."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        moved = [o.to(device) if device is not None else o for o in outputs]
        return torch.stack(moved) if first.dim() == 0 else torch.cat(moved, dim=0)
    if isinstance(first, Mapping):
        return type(first)((key, gather_outputs([o[key] for o in outputs], device)) for key in first)
    if isinstance(first, (list, tuple)):
        merged = [gather_outputs([o[i] for o in outputs], device) for i in range(len(first))]
        if isinstance(first, tuple) and hasattr(first, "_fields"):
            return type(first)(*merged)
        return type(first)(merged)
    if first is None:
        return None
    return list(outputs)


def run_chunked_step(module: nn.Module, hook: str, batch: Any, args: tuple[Any, ...],
                     devices: Sequence[torch.device]) -> Any:
    """``module.<hook>`` on each chunk of ``batch``, outputs gathered on ``devices[0]``."""
    chunks = split_batch(batch, len(devices))
    if devices[0].type != "cuda" or len(chunks) == 1:
        # CPU: the same arithmetic, one chunk after another, on the module itself.
        return gather_outputs([run_on_chunk(module, hook, chunk, args) for chunk in chunks])
    from torch.nn.parallel import parallel_apply, replicate

    from trainmesh.strategies.step_dispatch import StepCall, StepDispatcher
    from trainmesh.utilities.collections import move_to_device

    used = list(devices[: len(chunks)])
    # As DataParallel: fresh replicas every step, so state a step changes on one is lost.
    dispatcher = StepDispatcher(module)
    dispatcher.is_replica = True
    replicas = replicate(dispatcher, used)
    inputs = [(StepCall(hook), move_to_device(chunk, device), *args) for chunk, device in zip(chunks, used)]
    return gather_outputs(parallel_apply(replicas, inputs, devices=used), used[0])


def run_on_chunk(module: nn.Module, hook: str, chunk: Any, args: tuple[Any, ...]) -> Any:
    with running_chunk(chunk):  # so that self.log weighs values by this chunk's size
        return getattr(module, hook)(chunk, *args)


def mean_loss(output: Any) -> Any:
    """Without a ``training_step_end``, the loss is the mean of the per-chunk losses."""
    if isinstance(output, torch.Tensor):
        return output.mean()
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor):
        return {**output, "loss": output["loss"].mean()}
    return output
