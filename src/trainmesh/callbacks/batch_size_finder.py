"""Lightning's ``lightning.pytorch.callbacks.batch_size_finder`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.callbacks.finders import BatchSizeFinder

__all__ = ["BatchSizeFinder"]
