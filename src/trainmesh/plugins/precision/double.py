"""Lightning's ``lightning.pytorch.plugins.precision.double`` path, for a program that imports
from it: the names of ``trainmesh.plugins.precision``."""

from trainmesh.plugins.precision import DoublePrecision, DoublePrecisionPlugin
from trainmesh.utilities.refusal import refused_class

__all__ = ["DoublePrecision", "DoublePrecisionPlugin", "LightningDoublePrecisionModule"]

LightningDoublePrecisionModule = refused_class(
    "LightningDoublePrecisionModule",
    "Lightning's wrapper that casts a module's inputs to float64 inside its own Trainer; trainmesh's Trainer does that itself: use Trainer(precision='64-true')",
    module=__name__,
)
