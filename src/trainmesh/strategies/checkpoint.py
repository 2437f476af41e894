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
    inner = (unwrap(module) if unwrapped else module) if module is not None else None
    if inner is not None and "model" in state:
        inner.load_state_dict(state["model"], strict=strict)
    for optimizer, optimizer_state in zip(optimizers, state.get("optim", [])):
        if inner is not None and any(isinstance(key, str) for key in optimizer_state.get("state", {})):
            optimizer_state = numbered_by_position(optimizer_state, optimizer, inner)
        optimizer.load_state_dict(optimizer_state)


def numbered_by_position(state: dict[str, Any], optimizer: torch.optim.Optimizer, module: nn.Module) -> dict[str, Any]:
    """An optimizer state keyed by parameter name (what fsdp and model-parallel runs save) in
    torch's own form, numbered in this optimizer's order: matched by name, not by position, so
    a state saved by pipeline stages in any order lands on the right parameters."""
    names = {id(p): name for name, p in module.named_parameters()}
    saved_groups = state.get("param_groups", [])
    if len(saved_groups) != len(optimizer.param_groups):
        raise ValueError(f"the checkpoint's optimizer has {len(saved_groups)} parameter group(s), this one "
                         f"{len(optimizer.param_groups)}; resume with the same configure_optimizers")
    numbered: dict[str, Any] = {"state": {}, "param_groups": []}
    index = 0
    for saved, live in zip(saved_groups, optimizer.param_groups):
        ids = []
        for param in live["params"]:
            name = names.get(id(param))
            if name in state["state"]:
                numbered["state"][index] = state["state"][name]
            ids.append(index)
            index += 1
        numbered["param_groups"].append({**saved, "params": ids})
    return numbered


def load(path: str, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *,
         keys: CheckpointKeys, map_location: Any, part_of_model: bool = False) -> dict[str, Any]:
    """A checkpoint file, or a distributed checkpoint loaded into state shaped like this run's
    (``part_of_model``: this process holds some of the model's layers, a pipeline stage)."""
    if is_distributed_checkpoint(path):
        assert module is not None, "load a distributed checkpoint after setup_module"
        return load_distributed(path, templates_for(unwrap(module), list(optimizers), model_key=keys.model,
                                                    optimizers_key=keys.optimizers), part=part_of_model)
    return load_checkpoint_file(path, map_location=map_location)
