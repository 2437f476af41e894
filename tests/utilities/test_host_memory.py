"""Freed tensors of 4 MiB and more go back to the system once release_large_frees() ran (glibc)."""

import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import sys, torch
    from trainmesh.utilities.host_memory import release_large_frees

    def rss_mib():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024

    if sys.argv[1] == "release":
        assert release_large_frees()
    warm = torch.ones(2**21)
    del warm  # 8 MiB freed: glibc's default threshold rises above the 5 MiB tensors below
    big, small = [], []
    for _ in range(40):  # 5 MiB tensors between smaller ones that stay: holes, unless each is its own mapping
        big.append(torch.ones(1_300_000))
        small.append(torch.ones(65_536))  # 256 KiB, from the heap right after it
    before = rss_mib()
    big.clear()
    print(before - rss_mib())
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_large_tensors_leave_the_process_once_released():
    def freed(mode: str) -> float:
        done = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return float(done.stdout)

    assert freed("release") >= 150  # about 200 MiB of tensors freed, and returned
    assert freed("default") < 50  # the same frees leave heap holes that stay resident


HUGE_PAGES_PROGRAM = textwrap.dedent("""
    import os, sys
    from trainmesh.utilities.host_memory import huge_pages_in_effect

    if sys.argv[1] == "late":
        import torch

        torch.ones(4)  # torch reads its switch at the first CPU tensor
        os.environ["THP_MEM_ALLOC_ENABLE"] = "1"
    print(huge_pages_in_effect())
""")


def _system_allows_huge_pages() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as system:
            return "[never]" not in system.read()
    except OSError:
        return False


@pytest.mark.skipif(not _system_allows_huge_pages(), reason="transparent huge pages are off on this system")
def test_huge_pages_are_in_effect_only_when_set_before_the_first_tensor():
    import os

    def in_effect(mode: str, switch: str | None) -> bool:
        env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
        if switch is not None:
            env["THP_MEM_ALLOC_ENABLE"] = switch
        done = subprocess.run(
            [sys.executable, "-c", HUGE_PAGES_PROGRAM, mode], capture_output=True, text=True, timeout=120, env=env
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip() == "True"

    assert in_effect("none", "1")  # set where the process started (a launcher's worker)
    assert not in_effect("none", None)
    assert not in_effect("none", "0")
    assert not in_effect("late", None)  # set after torch's first CPU tensor: too late
