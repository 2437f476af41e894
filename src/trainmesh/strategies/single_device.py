"""Lightning's ``lightning.pytorch.strategies.single_device`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.strategies import SingleDeviceStrategy

__all__ = ["SingleDeviceStrategy"]
