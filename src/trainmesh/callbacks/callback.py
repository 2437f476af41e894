"""Lightning's ``lightning.pytorch.callbacks.callback`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.callbacks.base import Callback

__all__ = ["Callback"]
