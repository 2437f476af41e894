"""Which tensors and modules torch's distributed engine has sharded: the one place that asks.

``torch.distributed.tensor`` and ``torch.distributed.fsdp`` are imported at the first question,
not with trainmesh (``import trainmesh`` stays fast; a one-process run may never ask).

>>> import torch
>>> is_dtensor(torch.zeros(2)), count_fsdp_units(torch.nn.Linear(2, 2))
(False, 0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeGuard

import torch

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor


def is_dtensor(value: Any) -> TypeGuard[DTensor]:
    """Whether ``value`` is a DTensor (an FSDP2 shard, a tensor-parallel way, or a replica of one)."""
    if not isinstance(value, torch.Tensor) or not torch.distributed.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def count_fsdp_units(module: Any) -> int:
    """FSDP2 units (``fully_shard``'s modules) in ``module``, the root included; 0 for anything else."""
    if not isinstance(module, torch.nn.Module) or not torch.distributed.is_available():
        return 0
    from torch.distributed.fsdp import FSDPModule

    return sum(isinstance(m, FSDPModule) for m in module.modules())
