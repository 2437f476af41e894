"""Small helpers shared by every layer; nothing here imports a higher layer.

The names Lightning's ``utilities`` package exports are found here too, imported on first use
so that ``import trainmesh`` does not pay for them.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of this package that defines it
_LIGHTNING_NAMES = {
    "AllGatherGrad": "all_gather_grad",
    "AttributeDict": "attribute_dict",
    "CombinedLoader": "combined_loader",
    "GradClipAlgorithmType": "enums",
    "LightningEnum": "enums",
    "disable_possible_user_warnings": "warnings",
    "find_shared_parameters": "parameter_tying",
    "flatten_dict": "parsing",
    "grad_norm": "grads",
    "is_picklable": "parsing",
    "measure_flops": "flops",
    "move_data_to_device": "collections",
    "rank_zero_deprecation": "rank_zero",
    "rank_zero_info": "rank_zero",
    "rank_zero_only": "rank_zero",
    "rank_zero_warn": "rank_zero",
    "set_shared_parameters": "parameter_tying",
    "suggested_max_num_workers": "workers",
}

__all__ = sorted(_LIGHTNING_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _LIGHTNING_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LIGHTNING_NAMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LIGHTNING_NAMES))
