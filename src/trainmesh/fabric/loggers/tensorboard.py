"""``lightning.fabric.loggers.tensorboard``: the module path a Fabric program may import Fabric's
TensorBoard logger from (``from lightning.fabric.loggers.tensorboard import TensorBoardLogger``)."""

from trainmesh.fabric.loggers import TensorBoardLogger

__all__ = ["TensorBoardLogger"]
