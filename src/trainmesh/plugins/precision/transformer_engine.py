"""Lightning's ``lightning.pytorch.plugins.precision.transformer_engine`` path, for a program that imports
from it: the names of ``trainmesh.plugins.precision``."""

from trainmesh.plugins.precision import TransformerEnginePrecision, TransformerEnginePrecisionPlugin
from trainmesh.utilities.refusal import refused_class

__all__ = ["FabricTEPrecision", "TransformerEnginePrecision", "TransformerEnginePrecisionPlugin"]

FabricTEPrecision = refused_class(
    "FabricTEPrecision",
    "Lightning Fabric's Transformer Engine precision, which Lightning's module imports for its own use; NVIDIA Transformer Engine (CUDA fp8), which trainmesh's Fabric does not run: use Fabric(precision='bf16-mixed') or Trainer(precision='bf16-mixed')",
    module=__name__,
)
