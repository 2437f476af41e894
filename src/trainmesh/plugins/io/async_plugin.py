"""Lightning's ``lightning.pytorch.plugins.io.async_plugin`` path, for a program that imports from it:
``AsyncCheckpointIO`` (trainmesh's, in checkpoint/writers.py)."""

from trainmesh.plugins.io import AsyncCheckpointIO

__all__ = ["AsyncCheckpointIO"]
