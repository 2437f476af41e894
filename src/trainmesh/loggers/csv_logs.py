"""Lightning's module path of the CSV logger, ``lightning.pytorch.loggers.csv_logs.CSVLogger``,
which configurations name in ``_target_`` (the lightning-hydra-template's ``logger/csv.yaml``)."""

from typing import Any

from trainmesh.loggers.csv_logger import CSVLogger
from trainmesh.utilities.refusal import refused_class

__all__ = ["CSVLogger", "ExperimentWriter"]


def __getattr__(name: str) -> Any:
    # Lightning's module imports Fabric's CSV logger under this name: trainmesh's Fabric's
    # (trainmesh.fabric.loggers), imported when asked for (it imports this package's loggers)
    if name == "FabricCSVLogger":
        from trainmesh.fabric.loggers import CSVLogger as FabricCSVLogger

        return FabricCSVLogger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ExperimentWriter = refused_class(
    "ExperimentWriter",
    "the writer Lightning's CSVLogger keeps as its experiment; trainmesh's CSVLogger writes metrics.csv and "
    "hparams.yaml itself and is its own experiment: call logger.log_metrics(...) / logger.log_hyperparams(...)",
    module=__name__,
)
