"""``Fabric.all_reduce``'s results as Fabric's ``_sync_ddp`` gives them: in the caller's tensor.

Fabric reduces the tensor it is given in place and returns it (gloo has no mean: a sum divided by
the group's size, copied back into the tensor, so an integer tensor's mean is truncated).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def reduced_in_group(tensor: torch.Tensor, *, group: Any, op: str) -> torch.Tensor:
    """``tensor`` reduced over a torch process ``group`` of the program's own (``all_reduce(group=)``)."""
    reduced = tensor.clone()
    ops = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    dist.all_reduce(reduced, op=ops[op], group=group)
    return in_place(tensor, reduced / dist.get_world_size(group) if op == "mean" else reduced)


def in_place(tensor: torch.Tensor, reduced: torch.Tensor) -> torch.Tensor:
    """``tensor`` holding ``reduced``: Fabric's ``_sync_ddp`` reduces the caller's tensor in place (a
    program may rely on it and drop the result), an integer mean truncated into it by ``copy_``."""
    if reduced is not tensor:
        with torch.no_grad():  # as torch's in-place all_reduce, also on a leaf that requires grad
            tensor.copy_(reduced)
    return tensor
