"""``Fabric.save`` / ``load`` / ``load_raw`` over the Runtime's checkpoint service.

The file is Fabric's: one ``torch.save`` of the state, written by rank 0, with modules and
optimizers replaced by their state dicts (``filter``: per key, which of a state dict's entries
to keep). ``load`` restores modules, optimizers and objects with ``load_state_dict`` in place,
writes the other requested entries into ``state``, and returns what the checkpoint holds beyond
``state`` (all of it for no ``state``), as Fabric's ``Strategy.load_checkpoint``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime


def _stateful(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def check_filter(state: dict[str, Any], filter: dict[str, Callable[[str, Any], bool]] | None) -> None:
    """Fabric's checks of ``save(filter=...)``, with its words."""
    if filter is None:
        return
    if not isinstance(filter, dict):
        raise TypeError(f"Filter should be a dictionary, given {filter!r}")
    if not set(filter).issubset(state):
        raise ValueError(f"The filter keys {filter.keys() - state} are not present in the state keys {set(state)}.")
    for key, value in filter.items():
        if not callable(value):
            raise TypeError(f"Expected `fabric.save(filter=...)` for key {key!r} to be a callable, given {value!r}")


def save(runtime: Runtime, path: str | os.PathLike[str], state: dict[str, Any], filter: dict[str, Any] | None) -> None:
    """Fabric's file, through the Runtime (its strategy gathers what is sharded; rank 0 writes)."""
    if not runtime.capabilities.shards_optimizer_state:
        # Fabric's file holds an optimizer's own state_dict() where every rank holds all of it
        # (the Runtime's would add the parameters' names to its groups)
        state = {k: v.state_dict() if isinstance(v, torch.optim.Optimizer) else v for k, v in state.items()}
    converted: dict[str, Any] = {}
    for key, value in runtime.checkpoints.to_checkpoint(state).items():
        if filter is not None and key in filter and isinstance(value, dict):
            kept = {k: v for k, v in value.items() if filter[key](k, v)}
            if kept:
                converted[key] = kept  # Fabric's: a key whose entries are all filtered out is left out
        else:
            converted[key] = value
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)  # Fabric's TorchCheckpointIO makes them
    runtime.save(os.fspath(path), converted)


def load(
    runtime: Runtime, path: str | os.PathLike[str], state: Any, *, strict: bool, weights_only: bool | None
) -> dict[str, Any]:
    """Fabric's ``Strategy.load_checkpoint``: ``state`` a dict, a module or an optimizer (``load_raw``).
    ``weights_only`` as Fabric hands it to ``torch.load``: True, or None (torch's default, True since
    torch 2.6), refuses a checkpoint holding other objects than tensors and plain values with torch's error."""
    from trainmesh.checkpoint import check_weights_only

    check_weights_only(path, weights_only)
    checkpoint = runtime.load(os.fspath(path))  # every entry: nothing requested
    if not state:
        return checkpoint
    if isinstance(state, nn.Module):
        runtime.checkpoints.load_state_dicts(state, [], {"model": checkpoint}, strict=strict)
        return {}
    if isinstance(state, torch.optim.Optimizer):
        state.load_state_dict(checkpoint)
        return {}
    invalid = [key for key in state if key not in checkpoint]
    if strict and invalid:
        raise KeyError(
            f"The requested state contains a key '{invalid[0]}' that does not exist in the loaded checkpoint."
            " To disable strict loading, set `strict=False`."
        )
    for name, obj in state.copy().items():
        if name not in checkpoint:
            continue
        if isinstance(obj, nn.Module):
            runtime.checkpoints.load_state_dicts(obj, [], {"model": checkpoint.pop(name)}, strict=strict)
        elif _stateful(obj):
            obj.load_state_dict(checkpoint.pop(name))
        else:
            state[name] = checkpoint.pop(name)
    return checkpoint
