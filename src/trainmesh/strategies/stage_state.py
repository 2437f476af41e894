"""State dicts of a model split over pipeline stages, tensor-parallel ways and shards: each
stage's share of one whole model's state, for ``ModelParallelStrategy``.

A checkpoint holds the whole model once, under the names one process would use, whatever the
layout that wrote it: every stage contributes its own layers, and the optimizer's parameter
groups list every stage's parameters in the order one process's optimizer lists them. Loading
takes each stage's share back out of it (a file by names; a distributed checkpoint by DCP).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from trainmesh.checkpoint.compat import check_state_dict_fits
from trainmesh.checkpoint.distributed import (
    inspect_distributed,
    is_distributed_checkpoint,
    load_distributed,
    templates_for,
)
from trainmesh.checkpoint.keys import CheckpointKeys
from trainmesh.strategies import checkpoint as checkpoints
from trainmesh.strategies import collectives
from trainmesh.strategies.mesh import ParallelMesh
from trainmesh.utilities.collections import apply_to_tensors

_NUMBERED_WITHOUT_NAMES = (
    "numbered by position, without the parameters' names (torch's optimizer.state_dict(): a one-file "
    "checkpoint written by another program, or by trainmesh before it recorded the names), so a pipeline "
    "stage, holding some of the parameters, cannot tell which numbers are its own. Resume it once without a "
    "pipeline (one process, ddp, fsdp or tp) and save again, which records the names; or load only the "
    "weights (Trainer.validate/test/predict with ckpt_path=, or Module.load_from_checkpoint) and train on"
)


def state_dict(
    module: nn.Module,
    optimizers: Sequence[torch.optim.Optimizer],
    mesh: ParallelMesh,
    *,
    sharded: bool,
    whole_model_order: dict[str, int],
) -> dict[str, Any]:
    pipelined = mesh.group_size("pp") > 1
    # Full state without a pipeline: gathered onto rank 0's CPU. With one, every stage first
    # gathers its own layers (torch would give them to its first rank only), then the
    # stages' pieces make the whole model.
    state = checkpoints.sharded_state_dict(module, optimizers, sharded=sharded, cpu_offload=not pipelined)
    if not pipelined:
        return state
    if sharded:
        # Each stage writes its own shards, but one optimizer record for the whole model:
        # its parameter groups must name every stage's parameters (the checkpoint keeps one copy).
        for optimizer_state in state["optim"]:
            names = collectives.all_gather_object(mesh, _group_names(optimizer_state), over="pp")
            optimizer_state["param_groups"] = every_stages_groups(optimizer_state, names, whole_model_order)
        return state
    pieces = collectives.all_gather_object(mesh, apply_to_tensors(state, lambda t: t.detach().cpu()), over="pp")
    optim = []
    for index, optimizer_state in enumerate(state["optim"]):
        stage_states = [piece["optim"][index] for piece in pieces]
        optim.append(
            {
                "state": {k: v for each in stage_states for k, v in each.get("state", {}).items()},
                "param_groups": every_stages_groups(
                    optimizer_state, map(_group_names, stage_states), whole_model_order
                ),
            }
        )
    return {"model": {k: v for piece in pieces for k, v in piece["model"].items()}, "optim": optim}


def every_stages_groups(optimizer_state: dict[str, Any], names: Any, order: dict[str, int]) -> list[dict[str, Any]]:
    """This stage's parameter groups listing every stage's parameter names (``names``: per
    stage, per group), in the order one process's optimizer lists them (``order``)."""
    per_stage = list(names)
    return [
        {
            **group,
            "params": sorted(
                {name for stage in per_stage for name in stage[index]}, key=lambda name: order.get(name, len(order))
            ),
        }
        for index, group in enumerate(optimizer_state.get("param_groups", []))
    ]


def load_state_dict(
    module: nn.Module,
    optimizers: Sequence[torch.optim.Optimizer],
    state: dict[str, Any],
    mesh: ParallelMesh,
    *,
    strict: bool = True,
    ties: Sequence[tuple[str, ...]] = (),
) -> None:
    """This stage's share of ``state`` (a whole model's, or this stage's shards), loaded by the
    one sharded path (``checkpoints.load_sharded_state_dict``). ``ties``: the model's tied names."""
    own = set(module.state_dict())
    share: dict[str, Any] = {}
    if "model" in state:
        # A whole model's state (a file): this stage takes its own layers' entries.
        share["model"] = {k: v for k, v in state["model"].items() if k in own}
    if "optim" in state:
        share["optim"] = []
        for optimizer, saved in zip(optimizers, state["optim"]):
            if checkpoints.is_numbered(saved):
                # torch's own numbered form (a one-file checkpoint of one process or ddp): by the
                # names it records; by position only where this process holds every parameter.
                if mesh.group_size("pp") > 1 and not checkpoints.has_param_names(saved):
                    raise ValueError(f"the optimizer state {_NUMBERED_WITHOUT_NAMES}")
                saved = checkpoints.keyed_by_name(saved, optimizer, module)
            share["optim"].append(_only_params_of(saved, optimizer, module, ties))
    checkpoints.load_sharded_state_dict(module, optimizers, share, strict=strict)


def load_checkpoint(
    path: str,
    module: nn.Module,
    optimizers: Sequence[torch.optim.Optimizer],
    keys: CheckpointKeys,
    mesh: ParallelMesh,
    *,
    ties: Sequence[tuple[str, ...]],
) -> dict[str, Any]:
    """A pipeline stage's share of a checkpoint: a file cut down to its layers, or its layers read
    from a distributed checkpoint (the stages together must hold the checkpoint's)."""
    if not is_distributed_checkpoint(path):
        checkpoint = checkpoints.load(path, module, optimizers, keys=keys, map_location="cpu", part_of_model=True)
        return stage_share_of_file(checkpoint, path, module, keys, mesh, with_optimizers=bool(optimizers))
    shapes = inspect_distributed(path)[1]
    stored = {name: torch.empty(shape, device="meta") for name, shape in shapes[keys.model].items()}
    check_state_dict_fits(whole_model_shapes(module, mesh), stored, source=path)
    templates = templates_for(
        checkpoints.unwrap(module), list(optimizers), model_key=keys.model, optimizers_key=keys.optimizers
    )
    saved_names = _optimizer_state_names(shapes.get(keys.optimizers, {}))
    for index, template in enumerate(templates[keys.optimizers]):
        # A layout without a pipeline keeps a tied weight's optimizer state under its first name
        # only: this stage's copy reads it from there (load_state_dict puts it under its own name).
        state = template.get("state", {})
        for held, saved in tie_aliases(saved_names.get(index, set()), state, ties).items():
            state[saved] = state.pop(held)
    return load_distributed(path, templates, part=True)


def tie_aliases(saved: set[str], held: Iterable[str], ties: Sequence[tuple[str, ...]]) -> dict[str, str]:
    """Each held name a checkpoint's optimizer state does not name -> another name of its tie that
    it does (one process, ddp, fsdp and tp name a tied parameter once; a pipeline stage may hold
    the copy under the other name).

    >>> tie_aliases({"wte.weight"}, ["lm_head.weight", "ln.weight"], [("wte.weight", "lm_head.weight")])
    {'lm_head.weight': 'wte.weight'}
    """
    aliases = {}
    for name in held:
        group = next((group for group in ties if name in group), ())
        named = [other for other in group if other in saved]
        if name not in saved and named:
            aliases[name] = named[0]
    return aliases


def _optimizer_state_names(stored: Mapping[str, Any]) -> dict[int, set[str]]:
    """The parameter names each optimizer's state holds, from a distributed checkpoint's tensor
    names (``"0.state.lm_head.weight.exp_avg"``)."""
    names: dict[int, set[str]] = {}
    for key in stored:
        index, _, rest = key.partition(".")
        if rest.startswith("state."):
            names.setdefault(int(index), set()).add(rest.removeprefix("state.").rpartition(".")[0])
    return names


def whole_model_shapes(module: nn.Module, mesh: ParallelMesh) -> dict[str, Any]:
    """Every stage's state names and shapes (meta tensors), gathered over the pipeline."""
    shapes = {name: tuple(value.shape) for name, value in module.state_dict().items()}
    whole: dict[str, Any] = {}
    for piece in collectives.all_gather_object(mesh, shapes, over="pp"):
        whole.update({name: torch.empty(shape, device="meta") for name, shape in piece.items()})
    return whole


def stage_share_of_file(
    checkpoint: dict[str, Any],
    path: str,
    module: nn.Module,
    keys: CheckpointKeys,
    mesh: ParallelMesh,
    *,
    with_optimizers: bool,
) -> dict[str, Any]:
    """A whole model's checkpoint file, cut down to this stage's layers (checked against
    the whole pipeline's: every stage's names together must be the file's)."""
    own = module.state_dict()
    check_state_dict_fits(whole_model_shapes(module, mesh), checkpoint[keys.model], source=path)
    checkpoint[keys.model] = {k: v for k, v in checkpoint[keys.model].items() if k in own}
    saved_optimizers = checkpoint.get(keys.optimizers) or []
    unnamed = [
        state for state in saved_optimizers if checkpoints.is_numbered(state) and not checkpoints.has_param_names(state)
    ]
    if with_optimizers and unnamed:
        raise ValueError(f"{path} holds optimizer state {_NUMBERED_WITHOUT_NAMES}")
    return checkpoint


def _group_names(optimizer_state: dict[str, Any]) -> list[list[str]]:
    return [list(group["params"]) for group in optimizer_state.get("param_groups", [])]


def _only_params_of(
    saved: dict[str, Any], optimizer: torch.optim.Optimizer, module: nn.Module, ties: Sequence[tuple[str, ...]] = ()
) -> dict[str, Any]:
    """A name-keyed optimizer state cut down to the parameters this stage's optimizer holds; a
    tied copy the state names under the tie's other name takes that name's state."""
    names = {id(p): n for n, p in module.named_parameters()}
    held = {names[id(p)] for group in optimizer.param_groups for p in group["params"] if id(p) in names}
    if not saved.get("state") or not any(isinstance(k, str) for k in saved["state"]):
        return saved
    named = {name for group in saved.get("param_groups", []) for name in group["params"]}
    unnamed = held - named
    aliases = tie_aliases(named, unnamed, ties)
    if aliases:
        saved, unnamed = _with_tied_copies(saved, aliases), unnamed - aliases.keys()
    if unnamed:
        raise ValueError(
            f"the checkpoint's optimizer state does not name this run's parameters {sorted(unnamed)[:4]}: "
            "it was saved from another model, or under other names; resume with the same model, or "
            "load only its weights and train on"
        )
    groups = [{**group, "params": [p for p in group["params"] if p in held]} for group in saved.get("param_groups", [])]
    return {"state": {k: v for k, v in saved["state"].items() if k in held}, "param_groups": groups}


def _with_tied_copies(saved: dict[str, Any], aliases: Mapping[str, str]) -> dict[str, Any]:
    """``saved`` with each alias's state (a copy) and group entry beside its tie's."""
    state = dict(saved["state"])
    for name, other in aliases.items():
        if other in state:
            state[name] = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state[other].items()}
    groups = [
        {**group, "params": [*group["params"], *(name for name, other in aliases.items() if other in group["params"])]}
        for group in saved.get("param_groups", [])
    ]
    return {**saved, "state": state, "param_groups": groups}
