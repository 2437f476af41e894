"""Lightning's ``lightning.pytorch.profilers.xla`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.profilers import XLAProfiler

__all__ = ["XLAProfiler"]
