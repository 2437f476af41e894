"""Lightning's module path of the CSV logger, ``lightning.pytorch.loggers.csv_logs.CSVLogger``,
which configurations name in ``_target_`` (the lightning-hydra-template's ``logger/csv.yaml``)."""

from trainmesh.loggers.csv_logger import CSVLogger
from trainmesh.utilities.refusal import refused_class

__all__ = ["CSVLogger", "FabricCSVLogger"]

FabricCSVLogger = refused_class(
    "FabricCSVLogger",
    "Lightning Fabric's CSV logger, which Lightning's module imports for its own use; trainmesh has no Fabric: use trainmesh.loggers.CSVLogger",
    module=__name__,
)
