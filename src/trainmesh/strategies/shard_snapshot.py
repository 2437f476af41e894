"""A process's local shards of an FSDP2 model and its optimizers' state, read from any thread while
the model trains.

torchft sends a recovering replica group the state of a live one from its quorum thread, while the
live group's main thread runs the step's forward and backward. ``module.state_dict()`` cannot be
called then: FSDP2's state-dict pre-hook reshards every unit (``_to_sharded``), freeing the gathered
parameters the forward is using, and the backward then fails ("setStorage: ... out of bounds for
storage of size 0"). Nor can ``get_optimizer_state_dict``: it maps parameters by
``named_parameters()``, which holds the gathered ones during the forward. FSDP2 keeps each sharded
parameter (a DTensor ``nn.Parameter``, the one the optimizer steps) alive and unchanged until the
optimizer step, which torchft runs only after the quorum thread is done; so the names are taken
once, at rest, and the shards are read through those parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from trainmesh.utilities.dtensors import is_dtensor


class ShardSnapshot:
    """Built at rest (every unit sharded: before training); ``read()`` then gives what
    ``sharded_state_dict(module, optimizers, sharded=True)`` gives, each DTensor as its local shard,
    without calling the module's state-dict hooks."""

    def __init__(self, module: nn.Module, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, _get_fqns, get_model_state_dict

        # the names torch's state dicts use (wrappers such as activation checkpointing's left out)
        keys = set(get_model_state_dict(module, options=StateDictOptions(full_state_dict=False)))
        self._module, self._optimizers = module, list(optimizers)
        self._params: dict[nn.Parameter, str] = {}
        for name, param in module.named_parameters(remove_duplicate=False):
            self._params.setdefault(param, _only(_get_fqns(module, name)))
        self._buffers = {
            name: fqn
            for name, _ in module.named_buffers()
            if (fqn := _only(_get_fqns(module, name))) in keys  # persistent ones only, as state_dict()
        }
        missing = keys - set(self._params.values()) - set(self._buffers.values())
        if missing:
            raise RuntimeError(
                f"trainmesh: the state dict's entries {sorted(missing)} are neither parameters nor buffers"
            )

    def read(self) -> dict[str, Any]:
        with torch.no_grad():
            model = {fqn: _local(param) for param, fqn in self._params.items()}
            buffers = dict(self._module.named_buffers())
            model.update({fqn: buffers[name].detach() for name, fqn in self._buffers.items()})
            return {"model": model, "optim": [self._optimizer_state(o) for o in self._optimizers]}

    def _optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        state: dict[str, Any] = {}
        groups = []
        for group in optimizer.param_groups:
            names = [self._params[param] for param in group["params"]]
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": names})
            for param, name in zip(group["params"], names):
                if param in optimizer.state:  # an optimizer that has not stepped holds no state yet
                    state[name] = {k: _local(v) for k, v in optimizer.state[param].items()}
        return {"state": state, "param_groups": groups}


def _local(value: Any) -> Any:
    if is_dtensor(value):
        return value.to_local().detach()
    return value.detach() if isinstance(value, torch.Tensor) else value


def _only(fqns: set[str]) -> str:
    if len(fqns) != 1:
        raise RuntimeError(f"trainmesh: a parameter with several state-dict names {sorted(fqns)}")
    return next(iter(fqns))
