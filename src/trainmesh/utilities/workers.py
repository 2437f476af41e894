"""``suggested_max_num_workers``: DataLoader workers one process can use without oversubscribing."""

from __future__ import annotations

import os


def suggested_max_num_workers(local_world_size: int) -> int:
    """The CPUs this process may run on, shared among the machine's processes, less one for the
    process itself (at least 1).

    >>> suggested_max_num_workers(1) >= 1
    True
    """
    if local_world_size < 1:
        raise ValueError(f"local_world_size must be at least 1 (the processes on this machine), got {local_world_size}")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // local_world_size - 1)
