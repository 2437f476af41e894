"""Lightning's ``lightning.pytorch.plugins.precision.precision`` path, for a program that imports
from it: the names of ``trainmesh.plugins.precision``."""

from trainmesh.plugins.precision import Precision, PrecisionPlugin
from trainmesh.utilities.refusal import refused_class

__all__ = ["FabricPrecision", "Precision", "PrecisionPlugin"]

FabricPrecision = refused_class(
    "FabricPrecision",
    "Lightning Fabric's precision base class, which Lightning's module imports for its own use; trainmesh's Fabric takes its precision by name (Fabric(precision='bf16-mixed')), its plugins by their precision flag: use trainmesh.plugins.precision.Precision",
    module=__name__,
)
