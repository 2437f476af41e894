"""Gradient clipping and accumulation without synchronisation, for the strategies that need
more than the plain local versions."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ContextManager

import torch
from torch import nn


def clip_gradients_locally(module: nn.Module, *, max_norm: float | None, clip_value: float | None,
                           norm_type: float) -> torch.Tensor | None:
    """Clip this process's gradients: the global norm when every process holds the same ones
    (one device, or after DDP's all-reduce)."""
    if max_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm, norm_type=norm_type)
        # On DTensor gradients (fsdp) the norm is computed across every shard; make it a plain tensor.
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm
    assert clip_value is not None
    torch.nn.utils.clip_grad_value_(module.parameters(), clip_value)
    return None


def fsdp_gradient_sync_off(module: nn.Module) -> ContextManager[Any]:
    """Accumulate unsharded gradients locally; reduce-scatter on the last micro-batch only."""
    from torch.distributed.fsdp import FSDPModule

    @contextlib.contextmanager
    def context() -> Iterator[None]:
        fsdp_modules = [m for m in module.modules() if isinstance(m, FSDPModule)]
        for m in fsdp_modules:
            m.set_requires_gradient_sync(False, recurse=False)
        try:
            yield
        finally:
            for m in fsdp_modules:
                m.set_requires_gradient_sync(True, recurse=False)

    return context()
