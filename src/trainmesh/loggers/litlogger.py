"""Lightning's ``lightning.pytorch.loggers.litlogger`` path: ``LitLogger`` (loggers/missing.py says why it
stops when used)."""

from trainmesh.loggers.missing import LitLogger

__all__ = ["LitLogger"]
