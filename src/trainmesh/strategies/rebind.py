"""Point an optimizer built before a strategy placed the model at the parameters now in place.

FSDP2 (``fully_shard``) replaces every parameter with a sharded one. An optimizer made from
``model.parameters()`` before that would go on stepping the old tensors, which the model no
longer uses: the run would train nothing, with no error. The Runtime records each parameter's
name before placement and, for every optimizer it is given, swaps the old parameters for the
new ones of the same name, keeping the groups' hyper-parameters and any state.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn


class ParameterMoves:
    """Which parameter objects a placement replaced, and by what (matched by name)."""

    def __init__(self, module: nn.Module) -> None:
        # Weak references: keeping the old full-size tensors alive would defeat sharding.
        self._before = {id(p): (weakref.ref(p), name) for name, p in module.named_parameters()}
        self._after: dict[str, nn.Parameter] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Object identities mean nothing in another process (a spawned worker): travel empty.
        return {"_before": {}, "_after": {}}

    def record_placement(self, module: nn.Module) -> None:
        """Note the parameters ``module`` holds now, after the strategy placed it."""
        now = dict(module.named_parameters())
        self._after = {name: now[name] for ref, name in self._before.values()
                       if name in now and ref() is not None and ref() is not now[name]}

    def replacement(self, param: torch.Tensor) -> nn.Parameter | None:
        entry = self._before.get(id(param))
        if entry is None or entry[0]() is not param:
            return None
        return self._after.get(entry[1])


def rebind_optimizer(optimizer: torch.optim.Optimizer, moves: ParameterMoves) -> int:
    """Swap replaced parameters in ``optimizer`` for their replacements; returns how many moved.

    State tensors shaped like the whole parameter (Adam's moments, say) become this rank's
    shard of it, as the new parameter is.
    """
    moved = 0
    for group in optimizer.param_groups:
        for index, old in enumerate(group["params"]):
            new = moves.replacement(old)
            if new is None:
                continue
            group["params"][index] = new
            if old in optimizer.state:
                optimizer.state[new] = {key: _like(value, old, new) for key, value in optimizer.state.pop(old).items()}
            moved += 1
    return moved


def _like(value: Any, old: torch.Tensor, new: torch.Tensor) -> Any:
    """A state entry of ``old`` made to sit beside ``new`` (sharded as it is, on its device)."""
    if not isinstance(value, torch.Tensor) or value.shape != old.shape or value.dim() == 0:
        return value  # a step counter or anything not per-element: kept as it is
    if type(new).__name__ == "DTensor":
        from torch.distributed.tensor import distribute_tensor

        # Every rank holds the same whole state (it was built for the whole model): keep this
        # rank's piece without communication.
        return distribute_tensor(value.detach().to(new.device), new.device_mesh, new.placements, src_data_rank=None)
    return value.to(new.device)
