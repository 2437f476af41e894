"""Lightning's module path of the CSV logger, ``lightning.pytorch.loggers.csv_logs.CSVLogger``,
which configurations name in ``_target_`` (the lightning-hydra-template's ``logger/csv.yaml``)."""

from trainmesh.loggers.csv_logger import CSVLogger
from trainmesh.utilities.refusal import refused_class

__all__ = ["CSVLogger", "ExperimentWriter", "FabricCSVLogger"]

FabricCSVLogger = refused_class(
    "FabricCSVLogger",
    "Lightning Fabric's CSV logger, which Lightning's module imports for its own use; trainmesh has no Fabric: use trainmesh.loggers.CSVLogger",
    module=__name__,
)

ExperimentWriter = refused_class(
    "ExperimentWriter",
    "the writer Lightning's CSVLogger keeps as its experiment; trainmesh's CSVLogger writes metrics.csv and "
    "hparams.yaml itself and is its own experiment: call logger.log_metrics(...) / logger.log_hyperparams(...)",
    module=__name__,
)
