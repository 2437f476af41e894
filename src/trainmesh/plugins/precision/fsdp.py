"""Lightning's ``lightning.pytorch.plugins.precision.fsdp`` path, for a program that imports
from it: the names of ``trainmesh.plugins.precision``."""

from trainmesh.plugins.precision import FSDPMixedPrecisionPlugin, FSDPPrecision, FSDPPrecisionPlugin

__all__ = ["FSDPMixedPrecisionPlugin", "FSDPPrecision", "FSDPPrecisionPlugin"]
