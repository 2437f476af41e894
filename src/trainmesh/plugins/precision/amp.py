"""Lightning's ``lightning.pytorch.plugins.precision.amp`` path, for a program that imports
from it: the names of ``trainmesh.plugins.precision``."""

from trainmesh.plugins.precision import MixedPrecision, MixedPrecisionPlugin

__all__ = ["MixedPrecision", "MixedPrecisionPlugin"]
