"""Lightning's ``lightning.pytorch.core``: the module and data module classes under their
Lightning names (``from lightning.pytorch.core import LightningModule`` ports as
``from trainmesh.core import LightningModule``).

>>> from trainmesh.core import LightningDataModule, LightningModule
>>> LightningModule.__name__, LightningDataModule.__name__
('Module', 'DataModule')
"""

from __future__ import annotations

from trainmesh.datamodule import DataModule as LightningDataModule
from trainmesh.module import Module as LightningModule

__all__ = ["LightningDataModule", "LightningModule"]
