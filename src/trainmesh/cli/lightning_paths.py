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

# lightning.fabric's: Lightning writes its plugins' and accelerators' paths there (TorchCheckpointIO)
_LIGHTNING_PREFIXES = ("lightning.pytorch.", "pytorch_lightning.", "lightning.fabric.", "lightning_fabric.")
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
        found = {
            k: trainmesh_class_path(v) if k == "class_path" and isinstance(v, str) else _with_trainmesh_class_paths(v)
            for k, v in value.items()
        }
        theirs, ours, init_args = value.get("class_path"), found.get("class_path"), found.get("init_args")
        if isinstance(init_args, dict) and isinstance(theirs, str) and isinstance(ours, str) and ours != theirs:
            found["init_args"] = init_args_ours_take(theirs, ours, init_args)
        return found
    if isinstance(value, list):
        return [_with_trainmesh_class_paths(v) for v in value]
    return value


def init_args_ours_take(theirs: str, ours: str, init_args: dict[str, Any]) -> dict[str, Any]:
    """A Lightning class's ``init_args`` as trainmesh's class of that name takes them from a config.

    Lightning's ``--print_config`` and ``config.yaml`` write every parameter of its class, its
    defaults included (a ``DDPStrategy``'s ``accelerator: null``, ``dim: 0`` and the rest of
    torch's ``DistributedDataParallel`` arguments). Those trainmesh's class does not name are
    dropped where they hold Lightning's default (None, or torch DDP's default for that name: what
    trainmesh's strategy would use too); any other value is refused, naming it, rather than lost.

    Examples:
        >>> init_args_ours_take("lightning.pytorch.strategies.DDPStrategy", "trainmesh.strategies.DDPStrategy",
        ...                     {"accelerator": None, "dim": 0, "find_unused_parameters": True})
        {'find_unused_parameters': True}
    """
    module_name, _, name = ours.rpartition(".")
    accepted = _parameter_names(getattr(importlib.import_module(module_name), name))
    kept = {}
    for key, value in init_args.items():
        if key in accepted:
            kept[key] = value
        elif not (value is None or _torch_ddp_default(key) == (True, value)):
            raise ValueError(
                f"the config's {theirs} sets init_args.{key}={value!r}, which trainmesh's {name} does not take from a "
                f"config (it takes {sorted(accepted)}); leave it out or at Lightning's default, or build "
                f"{name}({key}=...) in code and pass it as Trainer(strategy=...)"
            )
    return kept


def _parameter_names(cls: type) -> set[str]:
    """The arguments LightningCLI's parser checks a config's ``init_args`` against (jsonargparse's view)."""
    from jsonargparse._signatures import get_signature_parameters  # the parser's own reading

    return {parameter.name for parameter in get_signature_parameters(cls)}


def _torch_ddp_default(key: str) -> tuple[bool, Any]:
    import inspect

    import torch

    parameter = inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters.get(key)
    return (False, None) if parameter is None else (True, parameter.default)


def load_lightning_yaml(text: str) -> Any:
    """jsonargparse's YAML loader, with Lightning's class paths read as trainmesh's."""
    from jsonargparse._loaders_dumpers import yaml_load  # the loader of its "yaml" mode

    return _with_trainmesh_class_paths(yaml_load(text))


def register_loader() -> None:
    """The parsers' loader mode (``LightningArgumentParser(parser_mode=LOADER_MODE)``)."""
    import yaml
    from jsonargparse import set_loader

    set_loader(LOADER_MODE, load_lightning_yaml, exceptions=(yaml.YAMLError,))
