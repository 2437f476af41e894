"""Find and restore parameters shared between modules (tied weights), as Lightning's helpers do.

>>> from torch import nn
>>> model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
>>> model[1].weight = model[0].weight
>>> find_shared_parameters(model)
[['0.weight', '1.weight']]
"""

from __future__ import annotations

from typing import Any

from torch import nn


def find_shared_parameters(module: nn.Module) -> list[list[str]]:
    """Groups of names under which one parameter object is registered, in registration order."""
    names_of: dict[int, list[str]] = {}
    parameters: dict[int, nn.Parameter] = {}  # keeps each object alive so ids stay unique
    for owner_name, owner in module.named_modules(remove_duplicate=False):
        for name, param in owner._parameters.items():
            if param is None:
                continue
            parameters[id(param)] = param
            names_of.setdefault(id(param), []).append(f"{owner_name}.{name}" if owner_name else name)
    return [_unique(names) for names in names_of.values() if len(_unique(names)) > 1]


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def set_shared_parameters(module: nn.Module, shared_params: list[list[str]]) -> nn.Module:
    """Tie again what :func:`find_shared_parameters` found (after a copy or a move untied it)."""
    for names in shared_params:
        first = _resolve(module, names[0])
        for path in names[1:]:
            owner_path, _, leaf = path.rpartition(".")
            setattr(_resolve(module, owner_path) if owner_path else module, leaf, first)
    return module


def _resolve(module: nn.Module, path: str) -> Any:
    for name in path.split("."):
        module = getattr(module, name)
    return module
