"""Lightning's ``lightning.pytorch.callbacks.lr_finder`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.callbacks.finders import LearningRateFinder

__all__ = ["LearningRateFinder"]
