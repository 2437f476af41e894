"""Tensor parallelism: a module's layers split across the ``tp`` axis with PyTorch's own
``parallelize_module`` and the plan the module states.

A plan maps module names (``fnmatch`` patterns such as ``"layers.*.up"`` are allowed, matched
one dotted component at a time as ``parallelize_module`` matches them) to ``ParallelStyle`` objects. It is checked before anything is split: a
name that matches no module, or a layer whose split dimension the tensor-parallel size does not
divide, is an error that names it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from torch import nn


def tensor_parallel_plan(module: nn.Module) -> dict[str, Any] | None:
    """The plan the module states (``Module.tensor_parallel_plan()``), or None."""
    stated = getattr(module, "tensor_parallel_plan", None)
    plan = stated() if callable(stated) else None
    if plan is not None and not isinstance(plan, Mapping):
        raise TypeError(
            f"{type(module).__name__}.tensor_parallel_plan() returned {type(plan).__name__}; return a dict "
            "{module name: ParallelStyle} (e.g. {'mlp.up': ColwiseParallel()}) or None"
        )
    return dict(plan) if plan is not None else None


def check_tensor_parallel_plan(module: nn.Module, plan: Mapping[str, Any], tp_size: int) -> None:
    """Every entry names a module, and every split dimension is divisible by ``tp_size``."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    names = [name for name, _ in module.named_modules() if name]
    owner = type(module).__name__
    for pattern, style in plan.items():
        matched = [name for name in names if plan_key_matches(name, pattern)]
        if not matched:
            shown = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
            raise ValueError(
                f"the tensor-parallel plan names {pattern!r}, but {owner} has no such submodule; its submodules "
                f"are: {shown}. Use those names (fnmatch patterns such as 'layers.*.up' are allowed)"
            )
        for name in matched:
            layer = module.get_submodule(name)
            dimension = _split_dimension(layer, style, ColwiseParallel, RowwiseParallel)
            if dimension is None:
                continue
            what, size = dimension
            if size % tp_size:
                raise ValueError(
                    f"the tensor-parallel plan splits {name} ({type(layer).__name__}) along its {what} of {size}, "
                    f"which {tp_size} tensor-parallel ranks cannot divide evenly. Choose a tp size that divides "
                    f"{size}, a layer size divisible by {tp_size}, or leave {name!r} out of the plan"
                )


def plan_key_matches(name: str, pattern: str) -> bool:
    """Whether plan key ``pattern`` names module ``name`` as ``parallelize_module`` reads it:
    component by component (``"layers.*.up"`` matches ``"layers.3.up"``; ``"*.up"`` does not,
    since ``*`` stands for one name, not a dotted path)."""
    names, patterns = name.split("."), pattern.split(".")
    return len(names) == len(patterns) and all(fnmatch.fnmatchcase(n, p) for n, p in zip(names, patterns))


def _split_dimension(layer: nn.Module, style: Any, colwise: type, rowwise: type) -> tuple[str, int] | None:
    """Which size of ``layer`` the style splits: Colwise splits outputs, Rowwise inputs."""
    if isinstance(layer, nn.Linear):
        if isinstance(style, colwise):
            return "out_features", layer.out_features
        if isinstance(style, rowwise):
            return "in_features", layer.in_features
    if isinstance(layer, nn.Embedding):
        if isinstance(style, colwise):
            return "embedding_dim", layer.embedding_dim
        if isinstance(style, rowwise):
            return "num_embeddings", layer.num_embeddings
    return None


def apply_tp(module: nn.Module, tp_mesh: Any, plan: Mapping[str, Any]) -> nn.Module:
    """Split the plan's layers across ``tp_mesh`` (the plan's entries for modules this pipeline
    stage does not hold are skipped: the stage holds only its own layers)."""
    from torch.distributed.tensor.parallel import parallelize_module

    present = [name for name, _ in module.named_modules() if name]
    here = {
        pattern: style for pattern, style in plan.items() if any(fnmatch.fnmatchcase(name, pattern) for name in present)
    }
    if here:
        parallelize_module(module, tp_mesh, here)
    return module
