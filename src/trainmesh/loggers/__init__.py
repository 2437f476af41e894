"""Loggers receive metrics and hyperparameters from the Trainer on global rank 0.

Importing this package does not import tensorboard, mlflow or wandb; each logger imports its
package when constructed.
"""

from trainmesh.loggers.base import Logger
from trainmesh.loggers.csv_logger import CSVLogger
from trainmesh.loggers.missing import CometLogger, LitLogger, NeptuneLogger
from trainmesh.loggers.mlflow import MLFlowLogger
from trainmesh.loggers.tensorboard import TensorBoardLogger
from trainmesh.loggers.wandb import WandbLogger

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
