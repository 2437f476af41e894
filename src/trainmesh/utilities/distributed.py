"""pytorch-lightning 1.9.5's ``pytorch_lightning.utilities.distributed`` (1.8 deprecated most of it, 2.0
removed it): ``rank_zero_only``, ``sync_ddp_if_available``, ``all_gather_ddp_if_available``,
``gather_all_tensors``, ... under the old module name, each warning with today's home as 1.9.5 warns.
Published 1.x code imports it at module level (``from pytorch_lightning.utilities.distributed import
rank_zero_only`` in the latent-diffusion models, ``sync_ddp_if_available`` / ``gather_all_tensors`` in
metrics of one's own), so without it the program stops at its imports.

>>> import torch
>>> from trainmesh.utilities.distributed import sync_ddp_if_available
>>> sync_ddp_if_available(torch.tensor(3.0))  # doctest: +SKIP
tensor(3.)
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainmesh.utilities.all_gather_grad import AllGatherGrad
from trainmesh.utilities.rank_zero import rank_zero_debug, rank_zero_info
from trainmesh.utilities.rank_zero import rank_zero_only as _rank_zero_only
from trainmesh.utilities.refusal import LightningOneName

__all__ = [
    "AllGatherGrad",
    "all_gather_ddp_if_available",
    "distributed_available",
    "gather_all_tensors",
    "get_default_process_group_backend_for_device",
    "init_dist_connection",
    "new_all_gather_ddp_if_available",
    "new_distributed_available",
    "new_gather_all_tensors",
    "new_get_default_process_group_backend_for_device",
    "new_init_dist_connection",
    "new_sync_ddp",
    "new_sync_ddp_if_available",
    "rank_zero_debug",
    "rank_zero_info",
    "rank_zero_only",
    "register_ddp_comm_hook",
    "sync_ddp",
    "sync_ddp_if_available",
    "tpu_distributed",
]

_INTERNAL = "a helper 2.0 made internal; copy it, or use torch.distributed"


def _warn(name: str, today: str = _INTERNAL) -> None:
    warnings.warn(
        f"trainmesh.utilities.distributed.{name} is pytorch-lightning 1.x's name (1.8 deprecated it, 2.0 "
        f"removed it); today: {today}",
        LightningOneName,
        stacklevel=3,
    )


def _deprecated(name: str, new: Callable[..., Any]) -> Callable[..., Any]:
    """1.9.5's ``name``: ``new`` (its ``new_*`` alias, silent) after the deprecation line."""

    @functools.wraps(new)
    def old(*args: Any, **kwargs: Any) -> Any:
        _warn(name)
        return new(*args, **kwargs)

    old.__name__ = old.__qualname__ = name
    return old


def _available() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_zero_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """1.x's ``rank_zero_only`` decorator: ``fn`` runs on global rank 0 only (the others get None).

    Args:
        fn: the function to run on rank 0 alone.

    Examples:
        >>> @rank_zero_only  # doctest: +SKIP
        ... def log_images(): ...
    """
    _warn("rank_zero_only", "trainmesh.utilities.rank_zero_only")
    return _rank_zero_only(fn)


def new_distributed_available() -> bool:
    """Whether a process group is running (1.9.5: ``torch.distributed`` available and initialized).

    Examples:
        >>> distributed_available()  # doctest: +SKIP
        False
    """
    return _available()


def tpu_distributed() -> bool:
    """Always False: trainmesh runs on no TPU (1.9.5: whether torch_xla runs on several TPU cores).

    Examples:
        >>> tpu_distributed()  # doctest: +SKIP
        False
    """
    _warn("tpu_distributed")
    return False


def new_get_default_process_group_backend_for_device(device: torch.device) -> str:
    """``"nccl"`` for a CUDA device, else ``"gloo"``, as 1.9.5 chose.

    Args:
        device: the process's device.

    Examples:
        >>> get_default_process_group_backend_for_device(torch.device("cpu"))  # doctest: +SKIP
        'gloo'
    """
    return "nccl" if device.type == "cuda" else "gloo"


def new_sync_ddp_if_available(result: torch.Tensor, group: Any = None, reduce_op: Any = None) -> torch.Tensor:
    """``sync_ddp(result, group, reduce_op)`` when a process group runs, else ``result`` as it is.

    Args:
        result: the tensor to reduce (in place).
        group: the process group (default: every process).
        reduce_op: a ``ReduceOp`` or its name; ``"mean"`` / ``"avg"`` sum and divide (default: sum).

    Examples:
        >>> sync_ddp_if_available(torch.tensor(2.0))  # doctest: +SKIP
        tensor(2.)
    """
    return _sync(result, group, reduce_op) if _available() else result


def new_sync_ddp(result: torch.Tensor, group: Any = None, reduce_op: Any = None) -> torch.Tensor:
    """All-reduce ``result`` over ``group`` after a barrier, as 1.9.5 did (a process group must run).

    Args:
        result: the tensor to reduce (in place).
        group: the process group (default: every process).
        reduce_op: a ``ReduceOp`` or its name; ``"mean"`` / ``"avg"`` sum and divide (default: sum).

    Examples:
        >>> sync_ddp(torch.tensor(2.0), reduce_op="mean")  # doctest: +SKIP
    """
    return _sync(result, group, reduce_op)


def _sync(result: torch.Tensor, group: Any, reduce_op: Any) -> torch.Tensor:
    group = dist.group.WORLD if group is None else group
    op, mean = reduce_op, False
    if isinstance(reduce_op, str):
        mean = reduce_op.lower() in ("avg", "mean")
        op = dist.ReduceOp.SUM if mean else getattr(dist.ReduceOp, reduce_op.upper())
    dist.barrier(group=group)
    dist.all_reduce(result, op=dist.ReduceOp.SUM if op is None else op, group=group)
    return result / dist.get_world_size(group) if mean else result


def new_all_gather_ddp_if_available(tensor: torch.Tensor, group: Any = None, sync_grads: bool = False) -> torch.Tensor:
    """Every process's ``tensor`` stacked (``(world_size, ...)``) when a process group runs, else
    ``tensor`` as it is; ``sync_grads`` lets the gradient flow back to each process's part.

    Args:
        tensor: this process's tensor (the same shape on every process).
        group: the process group (default: every process).
        sync_grads: whether the gather is differentiable.

    Examples:
        >>> all_gather_ddp_if_available(torch.ones(2)).shape  # doctest: +SKIP
        torch.Size([2])
    """
    if not _available():
        return tensor
    import torch.distributed.nn.functional as distributed_functional

    tensor = tensor.contiguous()
    with nullcontext() if sync_grads else torch.no_grad():
        gathered = distributed_functional.all_gather(tensor, dist.group.WORLD if group is None else group)
    return torch.stack(gathered)


def new_gather_all_tensors(result: torch.Tensor, group: Any = None) -> list[torch.Tensor]:
    """Every process's ``result`` in rank order, on every process; tensors of the same number of
    dimensions but different sizes are padded for the gather and trimmed back, as 1.9.5 did.

    Args:
        result: this process's tensor.
        group: the process group (default: every process).

    Examples:
        >>> gather_all_tensors(torch.arange(3))  # doctest: +SKIP
    """
    group = dist.group.WORLD if group is None else group
    result = result.contiguous()
    world_size = dist.get_world_size(group)
    dist.barrier(group=group)
    if result.ndim > 0:
        local_size = torch.tensor(result.shape, device=result.device)
        sizes = [torch.zeros_like(local_size) for _ in range(world_size)]
        dist.all_gather(sizes, local_size, group=group)
        max_size = torch.stack(sizes).max(dim=0).values
        if not all(bool((size == max_size).all()) for size in sizes):
            pad: list[int] = []
            for extra in reversed((max_size - local_size).tolist()):
                pad += [0, int(extra)]
            padded = F.pad(result, pad)
            gathered = [torch.zeros_like(padded) for _ in range(world_size)]
            dist.all_gather(gathered, padded, group=group)
            return [part[tuple(slice(int(n)) for n in size)] for part, size in zip(gathered, sizes, strict=True)]
    gathered = [torch.zeros_like(result) for _ in range(world_size)]
    dist.all_gather(gathered, result, group=group)
    return gathered


def new_init_dist_connection(
    cluster_environment: Any,
    torch_distributed_backend: str,
    global_rank: int | None = None,
    world_size: int | None = None,
    **kwargs: Any,
) -> None:
    """Start the process group from a cluster environment's address, port, rank and world size (nothing
    when one runs). The address reaches torch as ``init_method`` where 1.9.5 wrote ``MASTER_ADDR`` /
    ``MASTER_PORT`` into the environment (only trainmesh's launchers write it).

    Args:
        cluster_environment: a ``ClusterEnvironment`` (``main_address``, ``main_port``, ranks).
        torch_distributed_backend: ``"gloo"`` or ``"nccl"``.
        global_rank: this process's rank (default: the environment's).
        world_size: the number of processes (default: the environment's).
        **kwargs: passed on to ``torch.distributed.init_process_group``.

    Examples:
        >>> init_dist_connection(LightningEnvironment(), "gloo")  # doctest: +SKIP
    """
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available. Cannot initialize distributed process group")
    if dist.is_initialized():
        return
    rank = cluster_environment.global_rank() if global_rank is None else global_rank
    size = cluster_environment.world_size() if world_size is None else world_size
    kwargs.setdefault("init_method", f"tcp://{cluster_environment.main_address}:{cluster_environment.main_port}")
    dist.init_process_group(torch_distributed_backend, rank=rank, world_size=size, **kwargs)


def register_ddp_comm_hook(
    model: Any, ddp_comm_state: Any = None, ddp_comm_hook: Any = None, ddp_comm_wrapper: Any = None
) -> None:
    """Register a DDP communication hook on a ``DistributedDataParallel`` model (``ddp_comm_wrapper``
    wraps it first), as 1.9.5 did; nothing without a hook.

    Args:
        model: the ``DistributedDataParallel`` model.
        ddp_comm_state: the hook's state.
        ddp_comm_hook: ``hook(state, bucket) -> Future``.
        ddp_comm_wrapper: a wrapper such as ``fp16_compress_wrapper``.

    Examples:
        >>> register_ddp_comm_hook(ddp_model, ddp_comm_hook=default.fp16_compress_hook)  # doctest: +SKIP
    """
    if ddp_comm_hook is None:
        return
    if ddp_comm_wrapper is not None:
        rank_zero_info(
            f"DDP comm wrapper is provided, apply {ddp_comm_wrapper.__qualname__}({ddp_comm_hook.__qualname__})."
        )
        ddp_comm_hook = ddp_comm_wrapper(ddp_comm_hook)
    rank_zero_debug(f"Registering DDP comm hook: {ddp_comm_hook.__qualname__}.")
    model.register_comm_hook(state=ddp_comm_state, hook=ddp_comm_hook)


# 1.9.5's names: each warns, then runs its new_* (1.9.5 imported those from Fabric under these names)
distributed_available = _deprecated("distributed_available", new_distributed_available)
get_default_process_group_backend_for_device = _deprecated(
    "get_default_process_group_backend_for_device", new_get_default_process_group_backend_for_device
)
sync_ddp_if_available = _deprecated("sync_ddp_if_available", new_sync_ddp_if_available)
sync_ddp = _deprecated("sync_ddp", new_sync_ddp)
all_gather_ddp_if_available = _deprecated("all_gather_ddp_if_available", new_all_gather_ddp_if_available)
gather_all_tensors = _deprecated("gather_all_tensors", new_gather_all_tensors)
init_dist_connection = _deprecated("init_dist_connection", new_init_dist_connection)
