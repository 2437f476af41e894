"""Lightning's ``lightning.pytorch.plugins.precision.bitsandbytes`` path, for a program that imports
from it: the names of ``trainmesh.plugins.precision``."""

from trainmesh.plugins.precision import BitsandbytesPrecision, BitsandbytesPrecisionPlugin
from trainmesh.utilities.refusal import refused_class

__all__ = ["BitsandbytesPrecision", "BitsandbytesPrecisionPlugin", "FabricBNBPrecision"]

FabricBNBPrecision = refused_class(
    "FabricBNBPrecision",
    "Lightning Fabric's bitsandbytes precision, which Lightning's module imports for its own use; trainmesh's Fabric takes no bitsandbytes quantization: use Fabric(precision='bf16-mixed') or Trainer(precision='bf16-mixed')",
    module=__name__,
)
