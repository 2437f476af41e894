"""Lightning's ``lightning.pytorch.core.module`` import path (kfold.py's ``from pytorch_lightning.core.module import
LightningModule``): trainmesh's ``Module`` under its Lightning name."""

from trainmesh.module import Module as LightningModule

__all__ = ["LightningModule"]
