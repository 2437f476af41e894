"""Summing and broadcasting Keras variables across processes, in buckets of flat tensors.

Keras (torch backend) keeps each variable's value as a torch tensor (``variable.value``). These
helpers flatten many tensors of one dtype into one buffer, so that each bucket costs one
collective of the Runtime's process group, then copy the results back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from trainmesh.runtime import Runtime

BUCKET_BYTES = 25 * 1024 * 1024  # torch DDP's default bucket size


def buckets(tensors: Sequence[torch.Tensor]) -> list[list[int]]:
    """Indices of ``tensors`` grouped by dtype and device, each group cut at ``BUCKET_BYTES``."""
    groups: dict[tuple[torch.dtype, torch.device], list[list[int]]] = {}
    sizes: dict[tuple[torch.dtype, torch.device], int] = {}
    for index, tensor in enumerate(tensors):
        key = (tensor.dtype, tensor.device)
        nbytes = tensor.numel() * tensor.element_size()
        if key not in groups or sizes[key] + nbytes > BUCKET_BYTES:
            groups.setdefault(key, []).append([])
            sizes[key] = 0
        groups[key][-1].append(index)
        sizes[key] += nbytes
    return [bucket for group in groups.values() for bucket in group if bucket]


def _in_buckets(
    tensors: Sequence[torch.Tensor], collective: Callable[[torch.Tensor], torch.Tensor]
) -> list[torch.Tensor]:
    """``collective`` applied to every bucket's flat buffer; the results, one per tensor, in order."""
    results: list[Any] = [None] * len(tensors)
    for bucket in buckets(tensors):
        flat = torch.cat([tensors[i].detach().reshape(-1) for i in bucket])
        flat = collective(flat)
        offset = 0
        for i in bucket:
            count = tensors[i].numel()
            results[i] = flat[offset : offset + count].view_as(tensors[i])
            offset += count
    return results


def all_reduce_sum(runtime: Runtime, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor summed over every process (new tensors; the inputs are left as they are)."""
    if runtime.world_size == 1:
        return [tensor.detach().clone() for tensor in tensors]
    return _in_buckets(tensors, lambda flat: runtime.all_reduce(flat, "sum"))


def broadcast_from_zero(runtime: Runtime, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Rank 0's value of each tensor, on every process (new tensors)."""
    if runtime.world_size == 1:
        return [tensor.detach().clone() for tensor in tensors]

    def broadcast(flat: torch.Tensor) -> torch.Tensor:
        runtime.broadcast_tensors([flat], src=0)
        return flat

    return _in_buckets(tensors, broadcast)


def assign(variables: Sequence[Any], values: Sequence[torch.Tensor]) -> None:
    """Keras variables take ``values`` (their own dtype and shape)."""
    for variable, value in zip(variables, values, strict=True):
        variable.assign(value)


def broadcast_from(runtime: Runtime, tensors: Sequence[torch.Tensor], src: int) -> list[torch.Tensor]:
    """Rank ``src``'s value of each tensor, on every process (new tensors)."""
    if runtime.world_size == 1:
        return [tensor.detach().clone() for tensor in tensors]

    def broadcast(flat: torch.Tensor) -> torch.Tensor:
        runtime.broadcast_tensors([flat], src=src)
        return flat

    return _in_buckets(tensors, broadcast)
