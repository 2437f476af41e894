"""Lightning's ``lightning.pytorch.accelerators.cpu`` path: ``CPUAccelerator`` and ``get_cpu_stats``
(what ``DeviceStatsMonitor`` logs for a CPU run)."""

from __future__ import annotations

from trainmesh.accelerator_types import CPUAccelerator

__all__ = ["CPUAccelerator", "get_cpu_stats"]


# What Lightning's errors add (its ``str(RequirementCache("psutil"))`` where psutil is missing)
PSUTIL_MISSING = "Requirement 'psutil' not met. HINT: Try running `pip install -U 'psutil'`"


def _psutil_available() -> bool:
    try:
        import psutil  # noqa: F401
    except ImportError:
        return False
    return True


def get_cpu_stats() -> dict[str, float]:
    """Lightning's CPU accelerator's device statistics, from ``psutil``."""
    if not _psutil_available():
        raise ModuleNotFoundError(f"Fetching CPU device stats requires `psutil` to be installed. {PSUTIL_MISSING}")
    import psutil

    return {
        "cpu_vm_percent": psutil.virtual_memory().percent,
        "cpu_percent": psutil.cpu_percent(),
        "cpu_swap_percent": psutil.swap_memory().percent,
    }
