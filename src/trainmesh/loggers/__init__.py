"""Loggers receive metrics and hyperparameters from the Trainer on global rank 0.

Importing this package does not import tensorboard; :class:`TensorBoardLogger` imports it
when constructed.
"""

from trainmesh.loggers.base import Logger
from trainmesh.loggers.csv_logger import CSVLogger
from trainmesh.loggers.tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger"]
