"""Loggers receive metrics and hyperparameters from the Trainer on global rank 0.

Importing this package does not import tensorboard, mlflow or wandb; each logger imports its
package when constructed. The names below are imported on first use (PEP 562, as
``trainmesh.callbacks``): a run imports the logger it builds, not every logger's module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmesh.utilities.lazy import lazy_attribute, lazy_dir

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and the import graph's checks
    from trainmesh.loggers.base import Logger
    from trainmesh.loggers.csv_logger import CSVLogger
    from trainmesh.loggers.missing import CometLogger, LitLogger, NeptuneLogger
    from trainmesh.loggers.mlflow import MLFlowLogger
    from trainmesh.loggers.tensorboard import TensorBoardLogger
    from trainmesh.loggers.wandb import WandbLogger

# name -> the module of this package that defines it
_LAZY = {
    "CSVLogger": "csv_logger",
    "CometLogger": "missing",
    "LitLogger": "missing",
    "Logger": "base",
    "MLFlowLogger": "mlflow",
    "NeptuneLogger": "missing",
    "TensorBoardLogger": "tensorboard",
    "WandbLogger": "wandb",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, globals(), _LAZY, name)


def __dir__() -> list[str]:
    return lazy_dir(globals(), _LAZY)


__all__ = [
    "CSVLogger",
    "CometLogger",
    "LitLogger",
    "Logger",
    "MLFlowLogger",
    "NeptuneLogger",
    "TensorBoardLogger",
    "WandbLogger",
]
