"""Lightning's ``lightning.pytorch.callbacks.throughput_monitor`` path, for a program that imports
from it: ``ThroughputMonitor`` (trainmesh's, in callbacks/throughput.py)."""

from trainmesh.callbacks.throughput import ThroughputMonitor

__all__ = ["ThroughputMonitor"]
