"""trainmesh: one PyTorch model, written once, trained on one device or many.

>>> import trainmesh as tm
>>> tm.seed_everything(0)
0

The names below are imported when first used (PEP 562), not by ``import trainmesh``: the command
line's ``--help`` and ``--version`` answer without importing torch, and a program pays for what it
touches (``tm.Trainer`` imports the Trainer and everything under it, ``tm.seed_everything`` little).
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import TYPE_CHECKING, Any

from trainmesh.utilities.lazy import lazy_attribute, lazy_dir
from trainmesh.utilities.warnings import format_warning_as_lightning
from trainmesh.version import __version__

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors
    from trainmesh.banner import cli_lightning_logo
    from trainmesh.callbacks.base import Callback
    from trainmesh.datamodule import DataModule
    from trainmesh.memory_estimate import estimate_memory
    from trainmesh.module import Module
    from trainmesh.runtime import Runtime
    from trainmesh.seed import seed_everything
    from trainmesh.strategies.fault_tolerance import FaultTolerance
    from trainmesh.trainer.trainer import Trainer
    from trainmesh.utilities.rank_zero import rank_zero_only

    # Lightning's names, for a port that keeps its class names (``class Net(LightningModule)``).
    LightningModule = Module
    LightningDataModule = DataModule

# name -> (module, attribute): the package's face, each imported on first use.
_LAZY = {
    "Callback": ("trainmesh.callbacks.base", "Callback"),
    "DataModule": ("trainmesh.datamodule", "DataModule"),
    "Fabric": ("trainmesh.fabric", "Fabric"),
    "FaultTolerance": ("trainmesh.strategies.fault_tolerance", "FaultTolerance"),
    "LightningDataModule": ("trainmesh.datamodule", "DataModule"),
    "LightningModule": ("trainmesh.module", "Module"),
    "Module": ("trainmesh.module", "Module"),
    "Runtime": ("trainmesh.runtime", "Runtime"),
    "Trainer": ("trainmesh.trainer.trainer", "Trainer"),
    "cli_lightning_logo": ("trainmesh.banner", "cli_lightning_logo"),
    "estimate_memory": ("trainmesh.memory_estimate", "estimate_memory"),
    "rank_zero_only": ("trainmesh.utilities.rank_zero", "rank_zero_only"),
    "seed_everything": ("trainmesh.seed", "seed_everything"),
}


def __getattr__(name: str) -> Any:
    if name == "pytorch":
        # ``import lightning as L`` ported to ``import trainmesh as L``: Lightning's ``L.pytorch.callbacks.X``,
        # ``L.pytorch.loggers.X`` are trainmesh's own packages (``import lightning`` imports lightning.pytorch)
        return sys.modules[__name__]
    return lazy_attribute(__name__, globals(), _LAZY, name)


def __dir__() -> list[str]:
    return lazy_dir(globals(), _LAZY)


# The package's logger, as Lightning programs import it (`from lightning.pytorch import _logger`):
# INFO and above are shown, on stderr unless the program configured logging itself.
_logger = logging.getLogger(__name__)
_logger.setLevel(logging.INFO)
if not logging.getLogger().hasHandlers():
    _logger.addHandler(logging.StreamHandler())
    _logger.propagate = False

# Warnings show as Lightning's do once a program imports it: the library's own without their
# category and source line (a program that sets warnings.formatwarning itself afterwards keeps its own).
warnings.formatwarning = format_warning_as_lightning

__all__ = [
    "Callback",
    "DataModule",
    "Fabric",
    "FaultTolerance",
    "LightningDataModule",
    "LightningModule",
    "Module",
    "Runtime",
    "Trainer",
    "cli_lightning_logo",
    "estimate_memory",
    "rank_zero_only",
    "seed_everything",
    "__version__",
]
