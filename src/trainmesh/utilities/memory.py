"""Bytes of training state this process holds: parameters, gradients, optimizer state.

Sharded tensors (DTensor) count only their local shard: the figure is what this rank stores.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn


def tensor_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def local_state_bytes(module: nn.Module, optimizers: Iterable[Any]) -> dict[str, int]:
    """``{"parameters", "gradients", "optimizer_state"}`` bytes held by this process.

    >>> layer = nn.Linear(2, 2)
    >>> local_state_bytes(layer, [])["parameters"]
    24
    """
    params = list(module.parameters())
    state = 0
    for optimizer in optimizers:
        inner = getattr(optimizer, "optimizer", optimizer)
        inner = getattr(inner, "optim", inner)  # ZeroRedundancyOptimizer keeps its shard's optimizer here
        for entry in inner.state.values():
            state += sum(tensor_bytes(v) for v in entry.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    return {
        "parameters": sum(tensor_bytes(p) for p in params),
        "gradients": sum(tensor_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer_state": state,
    }
