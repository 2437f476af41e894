"""Collectives over one axis of the run's mesh: what metric reduction, early stopping and
prediction gathering use. On one process every call is local and free."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from trainmesh.strategies.mesh import ParallelMesh
from trainmesh.utilities.collections import apply_to_tensors

_OPS = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}


def _talks(mesh: ParallelMesh, axis: str) -> bool:
    """Whether a collective along ``axis`` has anyone to talk to."""
    return mesh.group_size(axis) > 1 and dist.is_available() and dist.is_initialized()


def holds_the_axis(mesh: ParallelMesh, group: Any, over: str = "dp") -> bool:
    """Whether the torch process ``group`` is made of exactly the processes along ``over`` (a
    reduction over it is then the axis's own). False without a process group."""
    if not (dist.is_available() and dist.is_initialized()):
        return False
    axis = mesh.group(over) if mesh.group_size(over) > 1 else None
    if axis is None and mesh.group_size(over) != dist.get_world_size():
        return False  # an axis of one process inside a larger world
    axis_ranks = dist.get_process_group_ranks(axis) if axis is not None else range(dist.get_world_size())
    return sorted(dist.get_process_group_ranks(group)) == sorted(axis_ranks)


def reduce(mesh: ParallelMesh, value: torch.Tensor, op: str = "mean", *, over: str = "dp") -> torch.Tensor:
    """``value`` reduced over the processes along ``over``; every one of them gets the result.

    >>> from trainmesh.strategies.mesh import ParallelDims
    >>> reduce(ParallelMesh(ParallelDims().resolved(1)), torch.tensor(3.0), "sum")
    tensor(3.)
    """
    if op not in _OPS:
        raise ValueError(f"reduce op {op!r} is not known; use one of {sorted(_OPS)}")
    if not _talks(mesh, over):
        return value
    reduced = value.clone()
    dist.all_reduce(reduced, op=getattr(dist.ReduceOp, _OPS[op]), group=mesh.group(over))
    return reduced / mesh.group_size(over) if op == "mean" else reduced


def reduce_in_place(
    mesh: ParallelMesh, value: torch.Tensor, op: str = "mean", *, over: str = "dp", group: Any = None
) -> torch.Tensor:
    """``value`` itself, reduced over the processes along ``over`` (or over ``group``), as
    Lightning's ``_sync_ddp`` does it: an all-reduce into ``value``, a mean divided in place (an
    integer tensor's truncated)."""
    if op not in _OPS:
        raise ValueError(f"reduce op {op!r} is not known; use one of {sorted(_OPS)}")
    if group is None:
        if not _talks(mesh, over):
            return value
        group = mesh.group(over)
    elif _outside(group, f"a {op} over a process group", refuse=op == "mean"):
        return value  # torch's collectives skip a process outside their group: its own value, as Lightning's
    dist.all_reduce(value, op=getattr(dist.ReduceOp, _OPS[op]), group=group)
    if op != "mean":
        return value
    size = dist.get_world_size(group)
    return value.div_(size) if torch.is_floating_point(value) else value.copy_(value / size)


def all_gather(
    mesh: ParallelMesh,
    value: Any,
    *,
    over: str = "dp",
    group: Any = None,
    sync_grads: bool = False,
    stack_alone: bool = True,
) -> Any:
    """Every tensor in ``value`` stacked over the processes along ``over`` (a new first dim).

    ``group``: a torch process group to gather over instead of the axis (Lightning's argument).
    ``sync_grads``: the gather is differentiable, as Lightning's ``AllGatherGrad``: a process's
    gradient for its own slice is the sum of every process's gradient for that slice.
    ``stack_alone=False``: with no process group at all (one process), ``value`` as it is
    (Lightning's ``LightningModule.all_gather``); under a group of one, stacked all the same.
    """
    if group is None and not _talks(mesh, over):
        if not stack_alone and not (dist.is_available() and dist.is_initialized()):
            return value
        return apply_to_tensors(value, lambda t: t.unsqueeze(0))
    if group is None:
        group = mesh.group(over)
    else:
        _outside(group, "a gather from a process group", refuse=True)

    def gather(tensor: torch.Tensor) -> torch.Tensor:
        if sync_grads:
            gathered: torch.Tensor = _GatherWithGradients.apply(tensor.contiguous(), group)  # type: ignore[no-untyped-call]
            return gathered
        return _gather(tensor.contiguous(), group)

    return apply_to_tensors(value, gather)


def _outside(group: Any, what: str, *, refuse: bool) -> bool:
    """Whether this process is outside the torch process ``group`` (a ``new_group`` of other ranks);
    ``refuse``: stop, what is asked (a mean, a gather) has no value outside the group (Lightning's
    ``_sync_ddp`` stops with torch's "Invalid process group specified", its gather with torch's
    "stack expects a non-empty TensorList")."""
    if dist.get_rank(group) >= 0:
        return False
    if refuse:
        raise ValueError(
            f"{what} of ranks {dist.get_process_group_ranks(group)}, on global rank {dist.get_rank()} which is "
            "not in the group: it has no value outside the group (Lightning's DDPStrategy stops there too). "
            "Pass a group only on the ranks it holds (each rank the group it belongs to, as "
            "torch.distributed.new_subgroups() gives it), and None (every process) on the others"
        )
    return True


def _gather(tensor: torch.Tensor, group: Any) -> torch.Tensor:
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, tensor, group=group)
    return torch.stack(parts)


class _GatherWithGradients(torch.autograd.Function):
    """all_gather whose backward sums the gathered gradient over the group and keeps this
    process's slice (what Lightning's ``AllGatherGrad`` computes)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return _gather(tensor, group)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = torch.cat(grads).contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad[dist.get_rank(ctx.group)], None


def all_gather_object(mesh: ParallelMesh, obj: Any, *, over: str = "world") -> list[Any]:
    """A picklable object from every process (``over="world"``) or along an axis, in rank order."""
    size = mesh.world_size if over == "world" else mesh.group_size(over)
    if size == 1 or not (dist.is_available() and dist.is_initialized()):
        return [obj]
    gathered: list[Any] = [None] * size
    dist.all_gather_object(gathered, obj, group=None if over == "world" else mesh.group(over))
    return gathered


def broadcast(mesh: ParallelMesh, obj: Any, src: int = 0) -> Any:
    """A picklable object from global rank ``src`` to every process."""
    if mesh.world_size == 1 or not (dist.is_available() and dist.is_initialized()):
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=src)
    return holder[0]


def broadcast_tensors(mesh: ParallelMesh, tensors: Any, src: int = 0, *, over: str = "dp") -> None:
    """In place: every tensor takes its value on the process of rank ``src`` along ``over``
    (its rank within that axis's group). Tensors of one dtype travel as one flat message."""
    tensors = list(tensors)
    if not tensors or not _talks(mesh, over):
        return
    group = mesh.group(over)
    source = src if group is None else dist.get_global_rank(group, src)
    by_kind: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for tensor in tensors:
        by_kind.setdefault((tensor.dtype, tensor.device), []).append(tensor)
    with torch.no_grad():
        for same in by_kind.values():
            flat = torch.cat([t.detach().reshape(-1) for t in same])
            dist.broadcast(flat, src=source, group=group)
            for tensor, piece in zip(same, torch.split(flat, [t.numel() for t in same])):
                tensor.copy_(piece.view_as(tensor))


def from_last_stage(mesh: ParallelMesh, value: Any, *, stage_rank: int) -> Any:
    """The last pipeline stage's ``value`` (any picklable object; the others pass anything), on every stage of
    this process's pipeline (``stage_rank``: the pipeline rank holding that stage): what only the
    last stage computes (the loss, logged metrics, a prediction) reaches the others, so that
    they all decide alike. Free without pipelining."""
    stages = mesh.group_size("pp")
    if stages == 1 or not (dist.is_available() and dist.is_initialized()):
        return value
    src, group = mesh.global_rank_with(pp=stage_rank), mesh.group("pp")
    holder = [value]
    dist.broadcast_object_list(holder, src=src, group=group)
    return holder[0]


def barrier(mesh: ParallelMesh) -> None:
    # The parent of ddp_spawn workers has a mesh of many but no group once they ended.
    if mesh.world_size > 1 and dist.is_available() and dist.is_initialized():
        dist.barrier()
