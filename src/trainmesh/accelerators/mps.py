"""Lightning's ``lightning.pytorch.accelerators.mps`` path: ``MPSAccelerator`` and ``get_device_stats``
(the host's memory and CPU figures an Apple-silicon run reports, under Lightning's ``M1_*`` keys)."""

from __future__ import annotations

from trainmesh.accelerator_types import MPSAccelerator
from trainmesh.accelerators.cpu import PSUTIL_MISSING, _psutil_available

__all__ = ["MPSAccelerator", "get_device_stats"]


def get_device_stats() -> dict[str, float]:
    """``psutil``'s virtual-memory, CPU and swap percentages, keyed as Lightning keys them."""
    if not _psutil_available():
        raise ModuleNotFoundError(f"Fetching MPS device stats requires `psutil` to be installed. {PSUTIL_MISSING}")
    import psutil

    return {
        "M1_vm_percent": psutil.virtual_memory().percent,
        "M1_percent": psutil.cpu_percent(),
        "M1_swap_percent": psutil.swap_memory().percent,
    }
