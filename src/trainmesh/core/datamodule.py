"""Lightning's ``lightning.pytorch.core.datamodule`` import path (kfold.py's ``from pytorch_lightning.core.datamodule import
LightningDataModule``): trainmesh's ``DataModule`` under its Lightning name."""

from trainmesh.datamodule import DataModule as LightningDataModule

__all__ = ["LightningDataModule"]
