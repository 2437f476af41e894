"""Give freed tensor memory back to the operating system (glibc's malloc, on Linux).

glibc serves an allocation below its mmap threshold from the heap, and a freed block in the
middle of the heap stays resident in the process. The threshold starts at 128 KiB and rises to
the size of each larger block freed, up to 32 MiB: after the first large tensor is freed, every
tensor up to 32 MiB comes from the heap. Sharding frees and allocates many tensors of many sizes
every step (each unit's gathered parameters, its unsharded gradients, the reduce-scatter
outputs, the optimizer's temporaries), and the holes they leave stay resident: on a
117M-parameter transformer under fsdp at world 2 (``benchmarks/sharding_memory.py --large``)
that was about 450 MiB of the 1.9 GiB peak per rank. With the threshold fixed at 4 MiB a tensor
of a million float32 elements or more gets its own mapping, returned whole when it is freed,
while smaller tensors (and small models, whose tensors all are) keep the heap's fast reuse.
The price is the page faults of mapping fresh memory for those tensors.
"""

from __future__ import annotations

import os
import sys

# glibc's mallopt parameter number for the mmap threshold (malloc.h).
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 * 2**20


def release_large_frees(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process; False where the C
    library is not glibc, or where the user set ``MALLOC_MMAP_THRESHOLD_`` (glibc's own setting,
    which then stands): nothing changed.

    >>> release_large_frees() in (True, False)
    True
    """
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # musl and others: their malloc has no such threshold to set
        return False
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))
