"""Lightning's ``lightning.pytorch.plugins.precision.xla`` path, for a program that imports
from it: the names of ``trainmesh.plugins.precision``."""

from trainmesh.plugins.precision import XLAPrecision, XLAPrecisionPlugin

__all__ = ["XLAPrecision", "XLAPrecisionPlugin"]
