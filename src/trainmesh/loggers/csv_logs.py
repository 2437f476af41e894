"""Lightning's module path of the CSV logger, ``lightning.pytorch.loggers.csv_logs.CSVLogger``,
which configurations name in ``_target_`` (the lightning-hydra-template's ``logger/csv.yaml``)."""

from trainmesh.loggers.csv_logger import CSVLogger

__all__ = ["CSVLogger"]
