"""The stuck-rank watchdog (supervision/watchdog.py): a run in which a rank stops completing steps
ends within the watchdog's time, non-zero, naming the rank the others wait for and showing
where it was; slow but legitimate work (a first step, a long validation, a save) goes through.

One ddp run (2 workers started the way users start them: ``python script.py``, which re-runs
itself through the elastic agent) and one single-process run, started together.
"""

import os
import pickle
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers.forked import can_fork, run_forked

HERE = Path(__file__).parent
TIMEOUT = 2.0  # watchdog_run.TIMEOUT
RUN_TIMEOUT = 120  # a hang guard: each leg also ends itself after 100 s (faulthandler)
# A leg's own last resort (watchdog_run.py's faulthandler): a stall that outlasts it was not ended by
# the watchdog. No tighter bound: how long the agent takes to stop its workers depends on the load.
LAST_RESORT = 100
LAUNCHER_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "OMP_NUM_THREADS",
)


class Run:
    """``python SCRIPT MODE OUT`` in its own session, started at once, output and exit status kept
    by :meth:`wait`. Where it can, as a fork of the fork server (helpers/forked.py), which
    imported torch and trainmesh already: the script is then the elastic agent (or the one
    process) as ``python`` would start it, and an agent's workers are new interpreters all the same."""

    def __init__(
        self, mode: str, out: Path, *, script: Path = HERE / "watchdog_run.py", timeout: float = RUN_TIMEOUT
    ) -> None:
        env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
        env["OMP_NUM_THREADS"] = "1"
        self.out = out
        self.output, self.ended_at, self.returncode = "", 0.0, None
        self.process: subprocess.Popen | None = None
        self.forked: Future | None = None
        if can_fork():
            pool = ThreadPoolExecutor(1)
            self.forked = pool.submit(self._run_and_time, script, [mode, str(out)], env=env, timeout=timeout, cwd=out)
            pool.shutdown(wait=False)
            return
        self.process = subprocess.Popen(
            [sys.executable, str(script), mode, str(out)],
            cwd=out,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def _run_and_time(self, *args, **kwargs) -> subprocess.CompletedProcess:
        # The end is taken when this run ends, not when the test comes to wait for it (the other
        # mode's run may end later): a wait elsewhere must not count as this run's stall.
        try:
            return run_forked(*args, **kwargs)
        finally:
            self.ended_at = time.time()

    def wait(self, deadline: float) -> None:
        if self.forked is not None:
            try:
                done = self.forked.result()
                self.output, self.returncode = done.stdout + done.stderr, done.returncode
            except subprocess.TimeoutExpired as timed_out:  # killed whole, the agent and its workers
                self.output = f"{timed_out.stdout or ''}{timed_out.stderr or ''}"
            return
        assert self.process is not None
        try:
            self.output, _ = self.process.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)  # the agent and its workers: never leave one behind
            self.output, _ = self.process.communicate()
        self.ended_at, self.returncode = time.time(), self.process.returncode

    def stalled_for(self) -> float:
        """Seconds from the stuck rank's last words (``STALL <time>``) to the end of the run."""
        match = re.search(r"^STALL (\S+)$", self.output, re.MULTILINE)
        assert match, f"the run never reached the stuck step (exit {self.returncode}):\n{self.output[-4000:]}"
        return self.ended_at - float(match[1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    started = {mode: Run(mode, tmp_path_factory.mktemp(mode)) for mode in ("ddp", "single")}
    deadline = time.monotonic() + RUN_TIMEOUT
    for run in started.values():
        run.wait(deadline)
    return started


@pytest.mark.skipif(sys.platform == "win32", reason="the elastic agent re-running the script is POSIX-only here")
def test_ddp_run_with_a_stuck_rank_ends_naming_it_and_showing_where_it_was(runs):
    run = runs["ddp"]
    tail = run.output[-6000:]
    # The first epoch's slow first step, long validation and slow save did not fire it.
    assert (run.out / "checkpoints" / "epoch=0-step=4.ckpt").exists(), tail
    assert run.stalled_for() < LAST_RESORT, tail  # the watchdog ended it, not the leg's last resort
    assert run.returncode == 124, tail
    assert "FIT ENDED" not in run.output
    # The agent names the stuck rank, and the verdict says it is the one the others wait for.
    assert "worker rank 1 failed (exit code 124)" in run.output, tail
    verdict = run.output[run.output.index("rank 1 did not arrive") :]
    where = verdict[verdict.index("Where rank 1 was") : verdict.index("Every rank")]
    assert re.search(r'watchdog_run\.py", line \d+, in training_step\n\s+time\.sleep\(3600\)', where), verdict
    assert re.search(r"rank 0: .* at \S+ in \w+", verdict), verdict
    # Every rank dumped its threads with faulthandler.
    for rank in (0, 1):
        assert f"trainmesh watchdog: rank {rank}'s threads" in run.output, tail
    # (Where each rank was is asserted on the verdict above: the ranks' dumps share one stderr and
    # their lines can interleave, so the dump's own text is not matched line by line.)


def test_single_process_run_with_a_stuck_step_ends_with_its_stack(runs):
    run = runs["single"]
    tail = run.output[-6000:]
    assert (run.out / "checkpoints" / "epoch=0-step=4.ckpt").exists(), tail
    assert run.stalled_for() < LAST_RESORT, tail  # the watchdog ended it, not the leg's last resort
    assert run.returncode == 124, tail
    assert "FIT ENDED" not in run.output
    assert "no training or validation step completed" in run.output, tail
    assert re.search(r'watchdog_run\.py", line \d+, in training_step\n\s+time\.sleep\(3600\)', run.output), tail
    assert "trainmesh watchdog: rank 0's threads" in run.output, tail


def _report(rank: int, collectives: dict[str, int], *, where: str = "train.py"):
    from trainmesh.supervision.stall_report import RankReport

    frame = f'  File "/x/{where}", line 7, in training_step\n    time.sleep(9)\n'
    return RankReport(rank=rank, stalled=True, idle_s=5.0, steps=3, collectives=collectives, stack=[frame])


def test_verdict_blames_the_rank_behind_in_collectives_and_it_exits_first():
    from trainmesh.supervision.stall_report import decide

    reports = {0: _report(0, {"0": 8, "1": 4}), 1: _report(1, {"0": 8}), 2: _report(2, {"0": 7, "1": 4})}
    verdict = decide(reports, world_size=3, timeout=5)
    assert verdict.stuck == (2,)
    assert "rank 2 did not arrive" in verdict.message
    assert "rank 2: 3 steps completed, idle 5.0 s, at train.py:7 in training_step" in verdict.message
    assert [verdict.exits_first(rank) for rank in range(3)] == [False, False, True]


def test_verdict_without_a_rank_behind_names_one_that_did_not_answer():
    from trainmesh.supervision.stall_report import decide

    verdict = decide({0: _report(0, {"0": 8}), 1: _report(1, {"0": 8})}, world_size=3, timeout=5)
    assert verdict.stuck == (2,)
    assert "rank 2 did not arrive" in verdict.message and "rank 2: no answer" in verdict.message
    assert verdict.exits_first(0) and not verdict.exits_first(1)  # the reporter ends the run
    everyone_stuck = decide({0: _report(0, {"0": 8}), 1: _report(1, {"0": 8})}, world_size=2, timeout=5)
    assert everyone_stuck.stuck == () and "no rank is behind the others" in everyone_stuck.message
    # A rank whose loop ended is not stuck: the one still in the loop is.
    left_behind = decide({1: _report(1, {"0": 8})}, world_size=2, timeout=5, finished={0})
    assert left_behind.stuck == (1,) and "rank 0: finished the loop" in left_behind.message


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-3.0, ValueError), (float("inf"), ValueError), ("300", TypeError), (True, TypeError)],
)
def test_a_bad_watchdog_timeout_says_what_it_is_and_how_to_fix_it(value, error):
    import trainmesh as tm

    with pytest.raises(error, match=r"watchdog_timeout=.*seconds.*None to turn the watchdog off"):
        tm.Trainer(watchdog_timeout=value, accelerator="cpu", logger=False, enable_progress_bar=False)


def test_a_trainer_with_a_watchdog_pickles_for_ddp_spawn():
    from trainmesh.supervision.watchdog import StepWatchdog

    watchdog = StepWatchdog(timeout=30)
    watchdog.start(processes=1)
    watchdog.feed()
    watchdog.stop()
    assert pickle.loads(pickle.dumps(watchdog)).timeout == 30.0


# A single-process fit whose epoch-end hook outlasts the default timeout (patched down to 0.5 s):
# the default does not arm on one process, so the fit ends as Lightning's (which has no watchdog).
LONG_EPOCH_END = """
import sys, time
import torch
import trainmesh as tm
from trainmesh.supervision import watchdog

watchdog.DEFAULT_TIMEOUT = float(sys.argv[1])  # the default a Trainer built now resolves "auto" to


class SlowEpochEnd(tm.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).pow(2).mean()

    def on_train_epoch_end(self):
        time.sleep(float(sys.argv[2]))  # sampling for minutes in the UvA energy tutorial's callback

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


data = torch.utils.data.TensorDataset(torch.randn(8, 4))
trainer = tm.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False,
                     enable_checkpointing=False, enable_model_summary=False)
assert trainer.fit(SlowEpochEnd(), torch.utils.data.DataLoader(data, batch_size=4)) is None
print("FIT ENDED", trainer.global_step, flush=True)
"""


def test_the_default_timeout_does_not_end_a_single_process_fit(tmp_path):
    from helpers.processes import run_code_forked

    done = run_code_forked(
        LONG_EPOCH_END, ["0.5", "1.5"], timeout=RUN_TIMEOUT, cwd=tmp_path, without=LAUNCHER_VARIABLES
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FIT ENDED 2" in done.stdout, done.stdout + done.stderr


# Lightning's DDPStrategy(timeout=timedelta(seconds=60)) sets the process group's timeout; the default
# watchdog fits under it, silently (Lightning has no watchdog, so a program sets no watchdog_timeout and
# a warning about one is noise), and still fires first. A timeout the user chose keeps its warning.
GROUP_TIMEOUT = """
import datetime, sys, warnings
import torch.distributed as dist
from trainmesh.supervision.watchdog import StepWatchdog

dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60))
for chosen in ("auto", 300):
    watchdog = StepWatchdog(timeout=chosen)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watchdog.start(processes=2)
    watchdog.stop()
    print(chosen, watchdog.timeout, [str(w.message)[:40] for w in caught], flush=True)
dist.destroy_process_group()
"""


def test_the_default_timeout_fits_under_a_shorter_process_group_timeout_without_a_warning(tmp_path):
    from helpers.processes import run_code_forked
    from trainmesh.launchers.environments import find_free_port

    done = run_code_forked(
        GROUP_TIMEOUT, [str(find_free_port())], timeout=RUN_TIMEOUT, cwd=tmp_path, without=LAUNCHER_VARIABLES
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "auto 27.5 []" in lines, done.stdout + done.stderr
    assert "300 300.0 ['watchdog_timeout=300 s is not well below']" in lines, done.stdout + done.stderr
