"""FSDPStrategy's host-memory policy on CPU (``release_host_memory``): freed host memory is
released (glibc's mmap threshold fixed) where torch's huge pages are in effect, or where the
user asked for it; never where the user said no; and the strategy asks its launcher for huge
pages in the processes it starts. In-process: the decision is checked, not its effect on memory
(tests/utilities/test_host_memory.py and benchmarks/fsdp_overhead.py measure that)."""

from __future__ import annotations

import os
import sys

import pytest

import trainmesh.strategies.fsdp as fsdp_module
from helpers.forked import can_fork, run_forked
from helpers.processes import run_program
from helpers.said import said as said_lines
from trainmesh.strategies.fsdp import FSDPStrategy
from trainmesh.strategies.protocol import Placement


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = {"released": 0}

    def release() -> bool:
        counts["released"] += 1
        return True

    monkeypatch.setattr(fsdp_module, "release_large_frees", release)
    return counts


@pytest.mark.parametrize(
    ("choice", "huge_pages", "released"),
    [(None, True, 1), (None, False, 0), (True, False, 1), (True, True, 1), (False, True, 0), (False, False, 0)],
)
def test_release_follows_the_choice_and_huge_pages(
    monkeypatch: pytest.MonkeyPatch, calls: dict[str, int], caplog, choice, huge_pages, released
) -> None:
    monkeypatch.setattr(fsdp_module, "huge_pages_in_effect", lambda: huge_pages)
    strategy = FSDPStrategy(release_host_memory=choice, placement=Placement())
    strategy._release_host_memory()
    assert calls["released"] == released
    said = said_lines(caplog)  # logged, as Lightning's info lines
    # Only the default, left without huge pages, says what it chose and how to get both.
    assert ("THP_MEM_ALLOC_ENABLE=1" in said) == (choice is None and not huge_pages)


@pytest.mark.parametrize(("choice", "asked"), [(None, True), (True, True), (False, False)])
def test_cpu_fsdp_asks_its_launcher_for_huge_pages(choice, asked) -> None:
    # Torch reads its switch at a process's first CPU tensor: only a launcher starting the workers
    # can set it in time, so the strategy names it and the Runtime hands it to the launcher.
    from trainmesh.runtime import Runtime

    expected = {"THP_MEM_ALLOC_ENABLE": "1"} if asked else {}
    strategy = FSDPStrategy(release_host_memory=choice, placement=Placement(device_type="cpu", devices=(0, 1)))
    assert strategy.worker_environment == expected
    runtime = Runtime(accelerator="cpu", devices=2, strategy=FSDPStrategy(release_host_memory=choice))
    assert runtime.launcher.environment == expected
    assert Runtime(accelerator="cpu", devices=2, strategy="ddp").launcher.environment == {}


def test_the_launcher_leaves_a_users_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from trainmesh.launchers.environments import set_worker_environment

    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    monkeypatch.setenv("TRAINMESH_TEST_UNSET", "")  # recorded, so that the test leaves it as it found it
    monkeypatch.delenv("TRAINMESH_TEST_UNSET")
    set_worker_environment({"THP_MEM_ALLOC_ENABLE": "1", "TRAINMESH_TEST_UNSET": "1"})
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "0"
    assert os.environ["TRAINMESH_TEST_UNSET"] == "1"


PROGRAM = """
import sys, torch
import trainmesh as tm
from trainmesh.utilities.host_memory import applied, huge_pages_in_effect

class Tiny(tm.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 8)), batch_size=2)
trainer = tm.Trainer(strategy=sys.argv[1], devices=2, accelerator="cpu", max_steps=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Tiny(), data)
print(f"rank {trainer.global_rank}: huge pages {huge_pages_in_effect()}, released {'M_MMAP_THRESHOLD' in applied()}")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc, Linux's huge pages")
def test_workers_that_trainmesh_starts_get_huge_pages_and_release(tmp_path) -> None:
    """End to end: run as python runs it, Trainer(strategy="fsdp", devices=2) starts the workers
    itself (the elastic agent: new interpreters), with torch's huge pages on from their start, so
    each releases freed host memory; under the same launch a ddp run's workers get neither. The
    agent, whose own pages are not checked, is a fork of the fork server where it can be (no
    second import of torch and trainmesh)."""
    script = tmp_path / "fit.py"
    script.write_text(PROGRAM)
    huge = huge_pages_allowed()
    env = {**{k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}, "OMP_NUM_THREADS": "1"}
    for strategy, expected in (("fsdp", huge), ("ddp", False)):
        if can_fork():
            done = run_forked(script, [strategy], env=env, timeout=240, cwd=tmp_path)
        else:
            done = run_program([str(script), strategy], timeout=240, without=("THP_MEM_ALLOC_ENABLE",), cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        for rank in (0, 1):
            assert f"rank {rank}: huge pages {expected}, released {expected}" in done.stdout, done.stdout


def huge_pages_allowed() -> bool:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as system:
            return "[never]" not in system.read()
    except OSError:
        return False
