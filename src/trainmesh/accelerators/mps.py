"""Lightning's ``lightning.pytorch.accelerators.mps`` path: ``MPSAccelerator`` and ``get_device_stats``
(the host's memory and CPU figures an Apple-silicon run reports, under Lightning's ``M1_*`` keys)."""

from __future__ import annotations

from trainmesh.accelerator_types import MPSAccelerator

__all__ = ["MPSAccelerator", "get_device_stats"]


def get_device_stats() -> dict[str, float]:
    """``psutil``'s virtual-memory, CPU and swap percentages, keyed as Lightning keys them."""
    try:
        import psutil
    except ImportError as error:
        raise ModuleNotFoundError("Fetching MPS device stats requires `psutil` to be installed.") from error
    return {
        "M1_vm_percent": psutil.virtual_memory().percent,
        "M1_percent": psutil.cpu_percent(),
        "M1_swap_percent": psutil.swap_memory().percent,
    }
