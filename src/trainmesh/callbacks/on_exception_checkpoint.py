"""Lightning's ``lightning.pytorch.callbacks.on_exception_checkpoint`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.callbacks.checkpoint import OnExceptionCheckpoint

__all__ = ["OnExceptionCheckpoint"]
