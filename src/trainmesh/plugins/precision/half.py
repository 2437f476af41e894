"""Lightning's ``lightning.pytorch.plugins.precision.half`` path, for a program that imports
from it: the names of ``trainmesh.plugins.precision``."""

from trainmesh.plugins.precision import HalfPrecision, HalfPrecisionPlugin

__all__ = ["HalfPrecision", "HalfPrecisionPlugin"]
