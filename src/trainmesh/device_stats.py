"""Device statistics from ``psutil`` under Lightning's keys and errors (``get_cpu_stats``, ``get_mps_stats``), apart from
the accelerator classes that report them (accelerator_types.py, accelerators/), which import it."""

from __future__ import annotations

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


def get_mps_stats() -> dict[str, float]:
    """``psutil``'s virtual-memory, CPU and swap percentages, keyed as Lightning keys them."""
    if not _psutil_available():
        raise ModuleNotFoundError(f"Fetching MPS device stats requires `psutil` to be installed. {PSUTIL_MISSING}")
    import psutil

    return {
        "M1_vm_percent": psutil.virtual_memory().percent,
        "M1_percent": psutil.cpu_percent(),
        "M1_swap_percent": psutil.swap_memory().percent,
    }
