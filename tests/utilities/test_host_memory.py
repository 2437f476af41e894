"""Freed tensors of 4 MiB and more go back to the system once release_large_frees() ran (glibc)."""

import subprocess
import sys
import textwrap

import pytest

from helpers.fork_checks import FORKS, results

# Each check needs a process whose allocator and torch's huge-page switch saw nothing yet: one
# interpreter imports torch and trainmesh, allocates no tensor, and runs each check of this file in a
# fork of itself (helpers/fork_checks.py) instead of a new interpreter per check or per test (2 CPU-s
# of imports each). A mode is CHECK:ARGUMENT.
PROGRAM = FORKS + textwrap.dedent("""
    import torch
    from trainmesh.utilities.host_memory import huge_pages_in_effect, release_large_frees

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

    # MODE is WHEN:SWITCH: THP_MEM_ALLOC_ENABLE set to SWITCH (unset where empty) before the fork's first
    # tensor ("start": where the process started, as a launcher's worker), or after it ("late").
    def in_effect(mode):
        os.environ.pop("THP_MEM_ALLOC_ENABLE", None)  # none from outside
        when, switch = mode.split(":")
        if when == "late":
            torch.ones(4)  # torch reads its switch at the first CPU tensor
            switch = "1"
        if switch:
            os.environ["THP_MEM_ALLOC_ENABLE"] = switch
        return huge_pages_in_effect()

    CHECKS = {"freed": freed, "in_effect": in_effect}
    in_forks(lambda mode: CHECKS[mode.split(":", 1)[0]](mode.split(":", 1)[1]), sys.argv[1:])
""")

LINUX = sys.platform.startswith("linux")  # glibc's malloc


def _system_allows_huge_pages() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as system:
            return "[never]" not in system.read()
    except OSError:
        return False


FREED = ["freed:release", "freed:default"] if LINUX else []
IN_EFFECT = ["in_effect:start:1", "in_effect:start:", "in_effect:start:0", "in_effect:late:"]
IN_EFFECT = IN_EFFECT if _system_allows_huge_pages() else []


@pytest.fixture(scope="module")
def found() -> dict[str, object]:
    """Each mode's result, from one interpreter running every check of this file in forks of itself."""
    modes = FREED + IN_EFFECT
    done = subprocess.run([sys.executable, "-c", PROGRAM, *modes], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    values = results(done.stdout)
    assert len(values) == len(modes), (done.stdout, done.stderr)
    return dict(zip(modes, values))


@pytest.mark.skipif(not LINUX, reason="glibc's malloc")
def test_freed_large_tensors_leave_the_process_once_released(found):
    released, default = (found[mode] for mode in FREED)
    assert released >= 150  # about 200 MiB of tensors freed, and returned
    assert default < 50  # the same frees leave heap holes that stay resident


@pytest.mark.skipif(not _system_allows_huge_pages(), reason="transparent huge pages are off on this system")
def test_huge_pages_are_in_effect_only_when_set_before_the_first_tensor(found):
    # Set where the process started (a launcher's worker): in effect; unset, "0", or set after
    # torch's first CPU tensor (too late): not.
    assert [found[mode] for mode in IN_EFFECT] == [True, False, False, False]
