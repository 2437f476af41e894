"""Lightning's ``lightning.pytorch.accelerators.cpu`` path: ``CPUAccelerator`` and ``get_cpu_stats``
(what ``DeviceStatsMonitor`` logs for a CPU run)."""

from __future__ import annotations

from trainmesh.accelerator_types import CPUAccelerator
from trainmesh.device_stats import get_cpu_stats

__all__ = ["CPUAccelerator", "get_cpu_stats"]
