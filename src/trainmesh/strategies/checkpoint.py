"""State dicts as the strategies without sharded state make them, and loading a checkpoint file
or a distributed (sharded) checkpoint, whose format is in ``trainmesh.checkpoint.distributed``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from trainmesh.checkpoint.distributed import is_distributed_checkpoint, load_distributed, templates_for
from trainmesh.checkpoint.io import load_checkpoint_file
from trainmesh.checkpoint.keys import CheckpointKeys


def unwrap(module: nn.Module) -> nn.Module:
    """The user's module inside DDP (or a configure_ddp wrapper), the step dispatcher, or dp's splitter."""
    while not hasattr(module, "training_step") and isinstance(getattr(module, "module", None), nn.Module):
        module = module.module
    return module


def plain_state_dict(module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *,
                     unwrapped: bool = True) -> dict[str, Any]:
    """The module's and optimizers' own state dicts; ``unwrapped``: the user's module inside
    the strategy's wrappers (one process places the module itself and keeps it as it is)."""
    state: dict[str, Any] = {"optim": [optimizer.state_dict() for optimizer in optimizers]}
    if module is not None:
        state["model"] = (unwrap(module) if unwrapped else module).state_dict()
    return state


def load_plain_state_dict(module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer],
                          state: dict[str, Any], *, strict: bool, unwrapped: bool = True) -> None:
    if module is not None and "model" in state:
        (unwrap(module) if unwrapped else module).load_state_dict(state["model"], strict=strict)
    for optimizer, optimizer_state in zip(optimizers, state.get("optim", [])):
        optimizer.load_state_dict(optimizer_state)


def load(path: str, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *,
         keys: CheckpointKeys, map_location: Any) -> dict[str, Any]:
    """A checkpoint file, or a distributed checkpoint loaded into state shaped like this run's."""
    if is_distributed_checkpoint(path):
        assert module is not None, "load a distributed checkpoint after setup_module"
        return load_distributed(path, templates_for(unwrap(module), list(optimizers), model_key=keys.model,
                                                    optimizers_key=keys.optimizers))
    return load_checkpoint_file(path, map_location=map_location)
