"""The ``trainmesh`` command line (``trainmesh fit|validate|test|predict``); see :mod:`trainmesh.cli.main`.

``CLI(Model, DataModule)`` gives a user's own script the same command line; ``LightningCLI``
(:mod:`trainmesh.cli.lightning_cli`) is Lightning's class with its arguments, for a Lightning
program's ``main.py``. The Lightning names import jsonargparse, so they load on first use.
"""

from __future__ import annotations

from typing import Any

from trainmesh.cli.cli_class import CLI
from trainmesh.utilities.lazy import lazy_attribute, lazy_dir

# Lightning's `lightning.pytorch.cli` names -> the trainmesh module that defines each.
_LIGHTNING_NAMES = {
    "LightningCLI": "trainmesh.cli.lightning_cli",
    "SaveConfigCallback": "trainmesh.cli.save_config",
    "LightningArgumentParser": "trainmesh.cli.lightning_parser",
    "ReduceLROnPlateau": "trainmesh.cli.lightning_parser",
    "instantiate_class": "trainmesh.cli.lightning_parser",
    "instantiate_module": "trainmesh.cli.lightning_parser",
    "ArgsType": "trainmesh.cli.lightning_parser",
    "OptimizerCallable": "trainmesh.cli.lightning_parser",
    "LRSchedulerCallable": "trainmesh.cli.lightning_parser",
    "LRSchedulerTypeTuple": "trainmesh.cli.lightning_parser",
    "LRSchedulerTypeUnion": "trainmesh.cli.lightning_parser",
}

__all__ = ["CLI", *_LIGHTNING_NAMES]


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, globals(), _LIGHTNING_NAMES, name, submodules=False)


def __dir__() -> list[str]:
    return lazy_dir(globals(), _LIGHTNING_NAMES)
