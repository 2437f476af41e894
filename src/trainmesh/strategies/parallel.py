"""Lightning's ``lightning.pytorch.strategies.parallel`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.strategies import ParallelStrategy

__all__ = ["ParallelStrategy"]
