"""Lightning's ``lightning.pytorch.profilers.base`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.profilers.profiler import PassThroughProfiler

__all__ = ["PassThroughProfiler"]
