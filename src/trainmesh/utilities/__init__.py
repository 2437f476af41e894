"""Small helpers shared by every layer; nothing here imports a higher layer.

The names Lightning's ``utilities`` package exports are found here too, imported on first use
so that ``import trainmesh`` does not pay for them.
"""

from __future__ import annotations

from typing import Any

from trainmesh.utilities.lazy import lazy_attribute, lazy_dir

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
    "is_shared_filesystem": "filesystem",
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
    return lazy_attribute(__name__, globals(), _LIGHTNING_NAMES, name, submodules=False)


def __dir__() -> list[str]:
    return lazy_dir(globals(), _LIGHTNING_NAMES)
