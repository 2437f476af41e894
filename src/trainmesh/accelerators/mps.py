"""Lightning's ``lightning.pytorch.accelerators.mps`` path: ``MPSAccelerator`` and ``get_device_stats``
(the host's memory and CPU figures an Apple-silicon run reports, under Lightning's ``M1_*`` keys)."""

from __future__ import annotations

from trainmesh.accelerator_types import MPSAccelerator
from trainmesh.device_stats import get_mps_stats

__all__ = ["MPSAccelerator", "get_device_stats"]

get_device_stats = get_mps_stats  # Lightning's name at this path
