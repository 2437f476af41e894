"""State dicts: as the strategies without sharded state make them (``plain_state_dict``), and as
torch's ``get/set_model_state_dict`` make them for sharded and split models (``sharded_state_dict``,
the one path of fsdp and model parallel); loading a checkpoint file or a distributed (sharded)
checkpoint, whose format is in ``trainmesh.checkpoint.distributed``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from trainmesh.checkpoint.io import load_checkpoint_file
from trainmesh.checkpoint.keys import CheckpointKeys, holds_state
from trainmesh.checkpoint.layout import is_distributed_checkpoint
from trainmesh.utilities.dtensors import is_dtensor


def unwrap(module: nn.Module) -> nn.Module:
    """The user's module inside DDP (or a configure_ddp wrapper), the step dispatcher, or dp's splitter."""
    while not hasattr(module, "training_step"):
        inner = getattr(module, "module", None)
        if not isinstance(inner, nn.Module):
            break
        module = inner
    return module


def plain_state_dict(
    module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, unwrapped: bool = True
) -> dict[str, Any]:
    """The module's and optimizers' own state dicts; ``unwrapped``: the user's module inside
    the strategy's wrappers (one process places the module itself and keeps it as it is)."""
    # Parameters are named as in the user's module (dp's splitter would prefix them "module.").
    named = unwrap(module) if module is not None else None
    state: dict[str, Any] = {
        "optim": [with_param_names(optimizer.state_dict(), optimizer, named) for optimizer in optimizers]
    }
    if module is not None:
        state["model"] = (unwrap(module) if unwrapped else module).state_dict()
    return state


def import_distributed_checkpoint() -> None:
    """Import torch's distributed checkpoint (DCP) and its state-dict functions now, as a strategy
    whose saves go through them sets up: else its first save pays for the import (0.03 s on an
    idle machine, 0.2 s on a busy one: issue 38), which a hand-written DCP script pays at its top,
    before any save, and which is not a cost of the save."""
    import torch.distributed.checkpoint
    import torch.distributed.checkpoint.state_dict  # noqa: F401


def sharded_state_dict(
    module: nn.Module, optimizers: Sequence[torch.optim.Optimizer], *, sharded: bool, cpu_offload: bool = True
) -> dict[str, Any]:
    """``{"model": ..., "optim": [...]}`` of a module whose parameters may be DTensors (FSDP2
    shards, tensor-parallel ways), optimizer state keyed by parameter name: full tensors gathered
    onto rank 0 (``cpu_offload``: in CPU memory), or with ``sharded=True`` each rank's shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=not sharded, cpu_offload=not sharded and cpu_offload)
    return {
        "model": get_model_state_dict(module, options=options),
        "optim": [
            get_optimizer_state_dict(module, optimizer, options=options) if holds_state(optimizer) else {}
            for optimizer in optimizers
        ],
    }


def load_sharded_state_dict(
    module: nn.Module, optimizers: Sequence[torch.optim.Optimizer], state: dict[str, Any], *, strict: bool
) -> None:
    """Load ``state``'s ``"model"`` and ``"optim"`` entries into a module whose parameters may be
    DTensors: full tensors (a single-file checkpoint) are sharded on the way in, shards go as
    they are; torch's numbered optimizer state (a one-process run's) is keyed by name first."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    if "model" in state:
        full = not any(is_dtensor(v) for v in state["model"].values())
        set_model_state_dict(module, state["model"], options=StateDictOptions(full_state_dict=full, strict=strict))
    for optimizer, saved in zip(optimizers, state.get("optim", [])):
        if not holds_state(optimizer):
            optimizer.load_state_dict(saved)  # the stand-in's {} (see holds_state)
            continue
        if is_numbered(saved):
            saved = keyed_by_name(saved, optimizer, module)
        tensors = [
            v for entry in saved.get("state", {}).values() for v in entry.values() if isinstance(v, torch.Tensor)
        ]
        # No tensor at all (SGD without momentum): nothing to shard, and torch's full-state load needs a
        # tensor to find the device ("Expected device to be set"): loaded as it is, param_groups only
        full = bool(tensors) and not any(is_dtensor(v) for v in tensors)
        set_optimizer_state_dict(module, optimizer, saved, options=StateDictOptions(full_state_dict=full))


def with_param_names(
    state: dict[str, Any], optimizer: torch.optim.Optimizer, module: nn.Module | None
) -> dict[str, Any]:
    """``optimizer.state_dict()`` with each group's parameter names (torch's optional
    ``param_names``), so that a run holding only some of the parameters (a pipeline stage) can
    tell which numbered state is whose; numbers alone name positions in this optimizer only."""
    if module is None or not state.get("param_groups"):
        return state
    names = {id(p): name for name, p in module.named_parameters()}
    groups = []
    for saved, live in zip(state["param_groups"], optimizer.param_groups):
        group_names = [names.get(id(p)) for p in live["params"]]
        if "param_names" in saved or None in group_names or len(group_names) != len(saved["params"]):
            return state  # named by the user already, or over parameters outside the module
        groups.append({**saved, "param_names": group_names})
    return {**state, "param_groups": groups}


def load_plain_state_dict(
    module: nn.Module | None,
    optimizers: Sequence[torch.optim.Optimizer],
    state: dict[str, Any],
    *,
    strict: bool,
    unwrapped: bool = True,
) -> None:
    inner = (unwrap(module) if unwrapped else module) if module is not None else None
    if inner is not None and "model" in state:
        inner.load_state_dict(state["model"], strict=strict)
    for optimizer, optimizer_state in zip(optimizers, state.get("optim", [])):
        if inner is not None and any(isinstance(key, str) for key in optimizer_state.get("state", {})):
            optimizer_state = numbered_by_position(optimizer_state, optimizer, inner)
        optimizer.load_state_dict(without_param_names(optimizer_state, optimizer))


def without_param_names(state: dict[str, Any], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The saved groups without the names ``with_param_names`` recorded, unless this optimizer
    names its parameters itself (torch would copy them into groups built without names)."""
    if any("param_names" in group for group in optimizer.param_groups):
        return state
    return {
        **state,
        "param_groups": [
            {k: v for k, v in group.items() if k != "param_names"} for group in state.get("param_groups", [])
        ],
    }


def has_param_names(state: dict[str, Any]) -> bool:
    groups = state.get("param_groups", [])
    return bool(groups) and all("param_names" in group for group in groups)


def is_numbered(state: dict[str, Any]) -> bool:
    """Torch's own form: state keyed by the parameter's position in its optimizer."""
    return any(isinstance(key, int) for key in state.get("state", {}))


def keyed_by_name(state: dict[str, Any], optimizer: torch.optim.Optimizer, module: nn.Module) -> dict[str, Any]:
    """``optimizer.state_dict()``'s numbered parameters renamed to the module's parameter names,
    the form ``set_optimizer_state_dict`` reads. By the names the checkpoint recorded
    (``with_param_names``) where it has them; else by position, which is right only where this
    optimizer lists the same parameters in the same order as the one that saved (the same model
    and ``configure_optimizers``, every parameter on this process)."""
    if has_param_names(state):
        ordered = [name for group in state["param_groups"] for name in group["param_names"]]
        numbers = [number for group in state["param_groups"] for number in group["params"]]
        by_number = dict(zip(numbers, ordered))
    else:
        names = {id(param): name for name, param in module.named_parameters()}
        by_number = dict(enumerate(names[id(p)] for group in optimizer.param_groups for p in group["params"]))
    groups = [
        {**{k: v for k, v in group.items() if k != "param_names"}, "params": [by_number[i] for i in group["params"]]}
        for group in state["param_groups"]
    ]
    return {"state": {by_number[i]: value for i, value in state["state"].items()}, "param_groups": groups}


def numbered_by_position(state: dict[str, Any], optimizer: torch.optim.Optimizer, module: nn.Module) -> dict[str, Any]:
    """An optimizer state keyed by parameter name (what fsdp and model-parallel runs save) in
    torch's own form, numbered in this optimizer's order: matched by name, not by position, so
    a state saved by pipeline stages in any order lands on the right parameters."""
    names = {id(p): name for name, p in module.named_parameters()}
    saved_groups = state.get("param_groups", [])
    if len(saved_groups) != len(optimizer.param_groups):
        raise ValueError(
            f"the checkpoint's optimizer has {len(saved_groups)} parameter group(s), this one "
            f"{len(optimizer.param_groups)}; resume with the same configure_optimizers"
        )
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


def numbered_as_torch(state: dict[str, Any]) -> dict[str, Any]:
    """A gathered optimizer state keyed by parameter name (DCP's full state: each group lists its
    parameters' names in the optimizer's order) in torch's own form, as a one-process or ddp file
    holds it: numbered in that order, each group's names kept as ``param_names``. Lightning 2.6's
    FSDP writes its full state so (``FSDP.rekey_optim_state_dict`` to parameter ids), and
    ``optimizer.load_state_dict`` reads only that form. An empty state (a rank other than 0 of a
    gather onto rank 0) stays empty."""
    numbers: dict[str, int] = {}
    groups = []
    for group in state.get("param_groups", []):
        names, first = list(group["params"]), len(numbers)
        numbers.update((name, first + i) for i, name in enumerate(names))
        groups.append({**group, "params": [numbers[name] for name in names], "param_names": names})
    if not groups:
        return state
    return {**state, "state": {numbers[name]: value for name, value in state["state"].items()}, "param_groups": groups}


def load(
    path: str,
    module: nn.Module | None,
    optimizers: Sequence[torch.optim.Optimizer],
    *,
    keys: CheckpointKeys,
    map_location: Any,
    part_of_model: bool = False,
) -> dict[str, Any]:
    """A checkpoint file, or a distributed checkpoint loaded into state shaped like this run's
    (``part_of_model``: this process holds some of the model's layers, a pipeline stage)."""
    if is_distributed_checkpoint(path):
        from trainmesh.checkpoint.distributed import load_distributed, templates_for  # DCP's reader: a directory

        assert module is not None, "load a distributed checkpoint after setup_module"
        return load_distributed(
            path,
            templates_for(unwrap(module), list(optimizers), model_key=keys.model, optimizers_key=keys.optimizers),
            part=part_of_model,
        )
    return load_checkpoint_file(path, map_location=map_location)
