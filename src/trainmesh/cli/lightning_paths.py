"""A Lightning config's class paths read as trainmesh's: the YAML loader of ``LightningCLI``'s parsers.

A Lightning config names Lightning's classes by their full path (its ``--print_config`` writes
``lightning.pytorch.callbacks.LearningRateMonitor``); trainmesh's class of that name in the same
package takes its place, so a config written for Lightning reads unchanged.
"""

from __future__ import annotations

import importlib
from typing import Any

# The packages whose classes a config names by their short name (jsonargparse looks a short name
# up among the subclasses imported so far; trainmesh's packages import their classes on first use).
SHORT_NAME_PACKAGES = (
    "trainmesh.callbacks",
    "trainmesh.loggers",
    "trainmesh.strategies",
    "trainmesh.profilers",
    "trainmesh.plugins",
    "trainmesh.accelerators",
)

_LIGHTNING_PREFIXES = ("lightning.pytorch.", "pytorch_lightning.")
LOADER_MODE = "trainmesh_lightning_yaml"


def trainmesh_class_path(class_path: str) -> str:
    """``lightning.pytorch.<package>[.<module>].<Name>`` -> ``trainmesh.<package>.<Name>`` where
    trainmesh's ``<package>`` has ``<Name>``; any other path unchanged.

    Examples:
        >>> trainmesh_class_path("lightning.pytorch.callbacks.lr_monitor.LearningRateMonitor")
        'trainmesh.callbacks.LearningRateMonitor'
        >>> trainmesh_class_path("torch.optim.Adam")
        'torch.optim.Adam'
    """
    prefix = next((p for p in _LIGHTNING_PREFIXES if class_path.startswith(p)), None)
    if prefix is None:
        return class_path
    parts = class_path[len(prefix) :].split(".")
    package = f"trainmesh.{parts[0]}"
    if len(parts) < 2 or package not in {*SHORT_NAME_PACKAGES, "trainmesh.cli"}:
        return class_path
    try:
        found = hasattr(importlib.import_module(package), parts[-1])
    except ImportError:
        found = False
    return f"{package}.{parts[-1]}" if found else class_path


def _with_trainmesh_class_paths(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: trainmesh_class_path(v) if k == "class_path" and isinstance(v, str) else _with_trainmesh_class_paths(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_with_trainmesh_class_paths(v) for v in value]
    return value


def load_lightning_yaml(text: str) -> Any:
    """jsonargparse's YAML loader, with Lightning's class paths read as trainmesh's."""
    from jsonargparse._loaders_dumpers import yaml_load  # the loader of its "yaml" mode

    return _with_trainmesh_class_paths(yaml_load(text))


def register_loader() -> None:
    """The parsers' loader mode (``LightningArgumentParser(parser_mode=LOADER_MODE)``)."""
    import yaml
    from jsonargparse import set_loader

    set_loader(LOADER_MODE, load_lightning_yaml, exceptions=(yaml.YAMLError,))
