"""trainmesh: one PyTorch model, written once, trained on one device or many.

>>> import trainmesh as tm
>>> tm.seed_everything(0)
0
"""

import logging

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
from trainmesh.version import __version__

# Lightning's names, for a port that keeps its class names (``class Net(LightningModule)``).
LightningModule = Module
LightningDataModule = DataModule

# The package's logger, as Lightning programs import it (`from lightning.pytorch import _logger`):
# INFO and above are shown, on stderr unless the program configured logging itself.
_logger = logging.getLogger(__name__)
_logger.setLevel(logging.INFO)
if not logging.getLogger().hasHandlers():
    _logger.addHandler(logging.StreamHandler())
    _logger.propagate = False

__all__ = [
    "Callback",
    "DataModule",
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
