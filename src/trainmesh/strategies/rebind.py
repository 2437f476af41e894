"""Point an optimizer built before a strategy placed the model at the parameters now in place.

FSDP2 (``fully_shard``) replaces every parameter with a sharded one. An optimizer made from
``model.parameters()`` before that would go on stepping the old tensors, which the model no
longer uses: the run would train nothing, with no error. The Runtime records each parameter's
name before placement and, for every optimizer it is given, swaps the old parameters for the
new ones of the same name, keeping the groups' hyper-parameters and any state.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainmesh.utilities.dtensors import is_dtensor

# The attribute each parameter carries from the ParameterMoves that saw it: (that record's token,
# the parameter's name). Not a weak reference: torch cannot swap a tensor that has one
# (torch.utils.swap_tensors, which Module.to uses for DTensor parameters), so a model that
# applied its own parallelize_module in configure_model(mesh) could not be moved or cast.
_ORIGIN = "_trainmesh_origin"


class ParameterMoves:
    """Which parameter objects a placement replaced, and by what (matched by name).

    Each parameter is marked with its name (an attribute on the tensor object, so that no other
    object, such as a later tensor reusing a freed one's ``id``, can be taken for it) and no
    reference to it is kept: keeping the old full-size tensors alive would defeat sharding.
    """

    def __init__(self, module: nn.Module) -> None:
        self._token = object()  # this record's marks, and no other's (another Runtime's, a copy's)
        for name, param in module.named_parameters():
            setattr(param, _ORIGIN, (self._token, name))
        self._after: dict[str, nn.Parameter] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Object identities mean nothing in another process (a spawned worker): travel empty.
        return {"_token": object(), "_after": {}}

    def _name(self, param: torch.Tensor) -> str | None:
        """The name ``param`` had when this record saw it, if it is one of those parameters."""
        origin = getattr(param, _ORIGIN, None)
        return origin[1] if isinstance(origin, tuple) and origin[0] is self._token else None

    def record_placement(self, module: nn.Module) -> None:
        """Note the parameters ``module`` holds now, after the strategy placed it."""
        self._after = {name: param for name, param in module.named_parameters() if self._name(param) != name}

    def replacement(self, param: torch.Tensor) -> nn.Parameter | None:
        name = self._name(param)
        new = self._after.get(name) if name is not None else None
        return new if new is not param else None


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
    if is_dtensor(new):
        from torch.distributed.tensor import distribute_tensor

        # Every rank holds the same whole state (it was built for the whole model): keep this
        # rank's piece without communication.
        return distribute_tensor(value.detach().to(new.device), new.device_mesh, new.placements, src_data_rank=None)
    return value.to(new.device)
