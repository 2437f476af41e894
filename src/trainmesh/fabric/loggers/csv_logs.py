"""``lightning.fabric.loggers.csv_logs``: the module path of Fabric's CSV logger
(``from lightning.fabric.loggers.csv_logs import CSVLogger``)."""

from trainmesh.fabric.loggers import CSVLogger

__all__ = ["CSVLogger"]
