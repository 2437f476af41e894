"""Lightning's ``lightning.pytorch.callbacks.batch_size_finder`` import path of ``BatchSizeFinder``."""

from trainmesh.callbacks.finders import BatchSizeFinder

__all__ = ["BatchSizeFinder"]
