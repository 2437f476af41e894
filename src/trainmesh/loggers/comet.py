"""Lightning's ``lightning.pytorch.loggers.comet`` path: ``CometLogger`` (loggers/missing.py says why it
stops when used)."""

from trainmesh.loggers.missing import CometLogger

__all__ = ["CometLogger"]
