"""pytorch-lightning 1.9.5's ``utilities.AllGatherGrad`` (2.0 removed it for
``torch.distributed.nn.functional.all_gather``): every rank's tensor stacked along a new first
dimension, the gradient summed over the ranks and handed back to each rank's own slice.

>>> AllGatherGrad.apply  # doctest: +ELLIPSIS
<built-in method apply of FunctionMeta object at ...>
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.distributed as dist

from trainmesh.utilities.refusal import LightningOneName


class AllGatherGrad(torch.autograd.Function):
    """``AllGatherGrad.apply(tensor, group=None)``: the tensors of every rank of ``group``, stacked
    (a process group must be running); the backward all-reduces the gradient and keeps this rank's part.

    Examples:
        >>> issubclass(AllGatherGrad, torch.autograd.Function)
        True
    """

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
        warnings.warn(
            "AllGatherGrad is Lightning 1.x's; today: torch.distributed.nn.functional.all_gather",
            LightningOneName,
            stacklevel=2,
        )
        ctx.group = group
        gathered = [torch.zeros_like(tensor) for _ in range(dist.get_world_size(group))]
        dist.all_gather(gathered, tensor, group=group)
        return torch.stack(gathered, dim=0)

    @staticmethod
    def backward(ctx: Any, *grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = torch.cat(grad_output)
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad[dist.get_rank(ctx.group)], None
