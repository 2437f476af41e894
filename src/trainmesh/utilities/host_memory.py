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
The price is fresh memory for those tensors every step, mapped a 4 KiB page at a time: about a
million page faults per step over 2 ranks on a 55M-parameter transformer, 2.2x the CPU of a
hand-written FSDP2 step (``benchmarks/fsdp_overhead.py``). On transparent huge pages a fault maps
2 MiB instead, which takes most of that away (what stays is the kernel zeroing the fresh pages:
1.2x at 55M; at 117M, where hand-written FSDP2 gets fresh pages too for its tensors above glibc's
32 MiB limit, 0.73x): torch puts CPU tensors of 2 MiB and more on them when
``THP_MEM_ALLOC_ENABLE=1`` is set, a variable it reads once, at the process's first CPU tensor.
So fsdp asks for it where its launcher starts the processes (``worker_environment``), and releases
freed memory only where it is in effect (``huge_pages_in_effect``), unless told otherwise.
"""

from __future__ import annotations

import os
import sys

# glibc's mallopt parameter number for the mmap threshold (malloc.h).
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 4 * 2**20
# torch's switch for transparent huge pages under CPU tensors of 2 MiB and more (c10's alloc_cpu).
HUGE_PAGES_VARIABLE = "THP_MEM_ALLOC_ENABLE"
_SYSTEM_HUGE_PAGES = "/sys/kernel/mm/transparent_hugepage/enabled"
# What this process set, for benchmarks and reports to print (mallopt has no getter).
_APPLIED: dict[str, int] = {}


def applied() -> dict[str, int]:
    """The malloc settings this module applied in this process, by glibc's name.

    >>> isinstance(applied(), dict)
    True
    """
    return dict(_APPLIED)


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
    if not libc.mallopt(_M_MMAP_THRESHOLD, threshold):
        return False
    _APPLIED["M_MMAP_THRESHOLD"] = threshold
    return True


def huge_pages_in_effect() -> bool:
    """Whether this process's large CPU tensors come on transparent huge pages: torch's switch was
    on at its first CPU tensor (its large tensors are then page-aligned, each advised to use huge
    pages) and the system allows them (``madvise`` or ``always``).

    >>> huge_pages_in_effect() in (True, False)
    True
    """
    try:
        with open(_SYSTEM_HUGE_PAGES) as system:
            if "[never]" in system.read():
                return False
    except OSError:  # not Linux, or no transparent huge pages in this kernel
        return False
    import torch

    # Larger than glibc's largest mmap threshold, so always a mapping of its own: page-aligned
    # where torch aligns for huge pages, 64 bytes past a page start otherwise. Never touched,
    # so never resident.
    probe = torch.empty(33 * 2**20, dtype=torch.uint8)
    return probe.data_ptr() % 4096 == 0
