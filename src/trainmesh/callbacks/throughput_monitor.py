"""Lightning's ``lightning.pytorch.callbacks.throughput_monitor`` import path (``from
lightning.pytorch.callbacks.throughput_monitor import ThroughputMonitor``): trainmesh's ``ThroughputMonitor``."""

from trainmesh.callbacks.throughput import ThroughputMonitor

__all__ = ["ThroughputMonitor"]
