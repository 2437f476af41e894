"""Lightning's ``lightning.pytorch.loggers.neptune`` path: ``NeptuneLogger`` (loggers/missing.py says why it
stops when used)."""

from trainmesh.loggers.missing import NeptuneLogger

__all__ = ["NeptuneLogger"]
