"""Lightning's ``lightning.pytorch.strategies.strategy`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.strategies import Strategy

__all__ = ["Strategy"]
