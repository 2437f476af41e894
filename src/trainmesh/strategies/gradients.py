"""Gradient clipping and accumulation without synchronisation, for the strategies that need
more than the plain local versions; and the division of a summed loss's gradients by the
global count of valid tokens."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from trainmesh.strategies import collectives
from trainmesh.strategies.mesh import ParallelMesh


def clip_gradients_locally(
    parameters: Iterable[torch.Tensor], *, max_norm: float | None, clip_value: float | None, norm_type: float
) -> torch.Tensor | None:
    """Clip the gradients of ``parameters``: the global norm when every process holds the same ones
    (one device, or after DDP's all-reduce), or every shard of them (fsdp's DTensors)."""
    if max_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
        # On DTensor gradients (fsdp) the norm is computed across every shard; make it a plain tensor.
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm
    assert clip_value is not None
    torch.nn.utils.clip_grad_value_(parameters, clip_value)
    return None


def fsdp_gradient_sync_off(module: nn.Module) -> AbstractContextManager[Any]:
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


def clip_gradients_globally(
    parameters: list[torch.Tensor],
    *,
    max_norm: float | None,
    clip_value: float | None,
    norm_type: float,
    across_stages: bool,
    stage_group: Any = None,
    counted_elsewhere: set[int] | frozenset[int] = frozenset(),
) -> torch.Tensor | None:
    """Clip by the norm of the whole model's gradient when its parameters are split: DTensor
    shards (tensor parallel, fsdp: their norm spans their mesh) and pipeline stages (each rank
    holds some layers: with ``across_stages`` the stages' norms are combined over ``stage_group``).
    ``counted_elsewhere``: ids of parameters (a tied weight's copy on a later stage) clipped here
    but whose gradient another stage counts in the norm, so that it counts once."""
    import torch.distributed as dist

    grads = [p.grad for p in parameters if p.grad is not None]
    counted = [p.grad for p in parameters if p.grad is not None and id(p) not in counted_elsewhere]
    if max_norm is None:
        assert clip_value is not None
        for grad in grads:  # one by one: torch's foreach refuses DTensors of different meshes together
            grad.clamp_(-clip_value, clip_value)
        return None
    # One norm per mesh and layout (DTensors on different meshes cannot share a foreach kernel):
    # each becomes a plain tensor, the norm over all of that group's shards.
    by_layout, counted_by_layout = _by_layout(grads), _by_layout(counted)
    device = grads[0].device if grads else torch.device("cpu")
    norms = []
    for group in counted_by_layout.values():
        norm = torch.nn.utils.get_total_norm(group, norm_type=norm_type)
        norms.append((norm.full_tensor() if hasattr(norm, "full_tensor") else norm).to(device, torch.float32))
    inf = norm_type == float("inf")
    local = (
        (torch.stack(norms).max() if inf else torch.stack(norms).pow(norm_type).sum())
        if norms
        else torch.zeros((), device=device)
    )
    if across_stages and dist.is_available() and dist.is_initialized():
        dist.all_reduce(local, op=dist.ReduceOp.MAX if inf else dist.ReduceOp.SUM, group=stage_group)
    total = local if inf else local.pow(1.0 / norm_type)
    # Scaled group by group, by a number: one foreach over DTensors of different meshes (or
    # DTensors and plain tensors) is refused by torch.
    coefficient = min(1.0, max_norm / (float(total) + 1e-6))
    if coefficient < 1.0:
        for group in by_layout.values():
            torch._foreach_mul_(group, coefficient)
    return total


def _by_layout(grads: list[torch.Tensor]) -> dict[Any, list[torch.Tensor]]:
    by_layout: dict[Any, list[torch.Tensor]] = {}
    for grad in grads:
        mesh = getattr(grad, "device_mesh", None)
        key = (id(mesh), tuple(getattr(grad, "placements", ())), grad.dtype, grad.device)
        by_layout.setdefault(key, []).append(grad)
    return by_layout


def divide_by_global_tokens(
    mesh: ParallelMesh,
    parameters: Iterable[torch.Tensor],
    num_tokens: torch.Tensor,
    loss_sum: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Make the gradients of a summed loss those of its mean over the global batch's tokens.

    ``num_tokens`` is this process's count of valid tokens over one optimizer step (every
    micro-batch and accumulated batch of it), ``loss_sum`` its summed loss. Counts (and sums)
    are added up over the data-parallel group. Every strategy *averages* gradients over that
    group (DDP's all-reduce, ZeRO's DDP, FSDP2's reduce-scatter and ``replicate``; a
    one-process strategy has a group of one), so the gradients hold ``sum / dp_size``:
    multiplied by ``dp_size / global count`` they are the global mean's. Returns the global
    mean loss (None without ``loss_sum``).
    """
    local = torch.stack([num_tokens, loss_sum.detach().to(num_tokens)]) if loss_sum is not None else num_tokens[None]
    total = collectives.reduce(mesh, local, "sum", over="dp")
    # No valid token anywhere: the summed loss is 0 and so is every gradient; nothing to divide.
    count = total[0].clamp_min(1)
    factor = (mesh.dp_size / count).float()  # bf16 gradients are scaled in float, as any bf16 op computes
    with torch.no_grad():
        for param in parameters:
            grad = param.grad
            if grad is None:
                continue
            # The local shard of a DTensor: every placement (sharded, replicated, partial sums)
            # scales with it, and a plain tensor factor cannot meet a DTensor in one op.
            local_grad = grad.to_local() if hasattr(grad, "to_local") else grad
            local_grad.mul_(factor.to(local_grad.device))
    return total[1] / count if loss_sum is not None else None
