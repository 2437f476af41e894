"""Freed tensors of 4 MiB and more go back to the system once release_large_frees() ran (glibc)."""

import os
import subprocess
import sys
import textwrap

import pytest

from helpers.fork_checks import FORKS, results

# Each check needs a process whose allocator and torch's huge-page switch saw nothing yet: one
# interpreter imports torch and trainmesh, allocates no tensor, and runs each check in a fork of
# itself (helpers/fork_checks.py) instead of a new interpreter per check (2 CPU-s of imports each).
PROGRAM = FORKS + textwrap.dedent("""
    import torch
    from trainmesh.utilities.host_memory import release_large_frees

    def rss_mib():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024

    def freed(mode):
        if mode == "release":
            assert release_large_frees()
        warm = torch.ones(2**21)
        del warm  # 8 MiB freed: glibc's default threshold rises above the 5 MiB tensors below
        big, small = [], []
        for _ in range(40):  # 5 MiB tensors between smaller ones that stay: holes, unless each is its own mapping
            big.append(torch.ones(1_300_000))
            small.append(torch.ones(65_536))  # 256 KiB, from the heap right after it
        before = rss_mib()
        big.clear()
        return before - rss_mib()

    in_forks(freed, sys.argv[1:])
""")


def _run(program: str, modes: list[str], env: dict[str, str] | None = None) -> list:
    done = subprocess.run([sys.executable, "-c", program, *modes], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    found = results(done.stdout)
    assert len(found) == len(modes), (done.stdout, done.stderr)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_large_tensors_leave_the_process_once_released():
    released, default = _run(PROGRAM, ["release", "default"])
    assert released >= 150  # about 200 MiB of tensors freed, and returned
    assert default < 50  # the same frees leave heap holes that stay resident


# MODE is WHEN:SWITCH: THP_MEM_ALLOC_ENABLE set to SWITCH (unset where empty) before the fork's first
# tensor ("start": where the process started, as a launcher's worker), or after it ("late").
HUGE_PAGES_PROGRAM = FORKS + textwrap.dedent("""
    from trainmesh.utilities.host_memory import huge_pages_in_effect

    def in_effect(mode):
        when, switch = mode.split(":")
        if when == "late":
            import torch

            torch.ones(4)  # torch reads its switch at the first CPU tensor
            switch = "1"
        if switch:
            os.environ["THP_MEM_ALLOC_ENABLE"] = switch
        return huge_pages_in_effect()

    in_forks(in_effect, sys.argv[1:])
""")


def _system_allows_huge_pages() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as system:
            return "[never]" not in system.read()
    except OSError:
        return False


@pytest.mark.skipif(not _system_allows_huge_pages(), reason="transparent huge pages are off on this system")
def test_huge_pages_are_in_effect_only_when_set_before_the_first_tensor():
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    in_effect = _run(HUGE_PAGES_PROGRAM, ["start:1", "start:", "start:0", "late:"], env)
    # Set where the process started (a launcher's worker): in effect; unset, "0", or set after
    # torch's first CPU tensor (too late): not.
    assert in_effect == [True, False, False, False]
