"""Lightning's ``lightning.pytorch.accelerators.accelerator`` path, for a program that imports from it: the same names,
trainmesh's objects (defined where the package's own names are)."""

from trainmesh.accelerator_types import Accelerator

__all__ = ["Accelerator"]
