"""Lightning's ``lightning.pytorch.plugins.precision.deepspeed`` path, for a program that imports
from it: the names of ``trainmesh.plugins.precision``."""

from trainmesh.plugins.precision import DeepSpeedPrecision, DeepSpeedPrecisionPlugin

__all__ = ["DeepSpeedPrecision", "DeepSpeedPrecisionPlugin"]
