"""SIGTERM (SLURM, Kubernetes, torch's agent) and SIGUSR1 (SLURM's --signal) during fit: every
process finishes the same step, the checkpoint of that step is saved, the run exits 75, and the
next start resumes from it, ending bit-identical to a run that was never stopped. Under SLURM,
SIGUSR1 also requeues the job (a fake ``scontrol`` on PATH records the call).

One chain of real 2-process runs in one folder carries the ddp cases (each stop at a random
step, each resume automatic): SIGTERM to trainmesh's agent (``python script.py``); SIGTERM to
every one of SLURM's tasks, as SLURM sends it; SIGUSR1 to them; the requeued job's restart, which
runs to the end and must match the run never stopped. The SIGTERM-to-every-task stage and the
requeued run save in the background (AsyncCheckpointIO): the stop waits for the save in flight.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from preemption_helpers import (
    MAX_STEPS,
    RUN,
    checkpoint_step,
    launcher_variables,
    run_script,
    run_slurm_tasks,
    same_weights,
    stopped_steps,
)

import trainmesh as tm
from helpers.processes import run_code_forked
from helpers.restarts import as_restart_of
from helpers.said import said
from trainmesh.launchers.environments import find_free_port

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")

PREEMPTED = 75
JOB = "4242"


@dataclass
class Stage:
    """One run of the chain: how it was stopped, and what it left."""

    root: Path
    at: int  # the step after which the signal was sent
    results: list[subprocess.CompletedProcess]  # the agent's, or each SLURM task's
    steps: list[int] = field(default_factory=list)  # each rank's stop step (Preempted.step)
    saved_step: int | None = None  # global_step in the program's last-preempted-<hash>.ckpt

    def explain(self) -> str:
        tails = "\n".join(f"--- exit {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}" for r in self.results)
        return f"signal after step {self.at}, stop steps {self.steps}, saved step {self.saved_step}\n{tails}"


def preempted_file(root: Path) -> Path:
    """The one preemption checkpoint in root: last-preempted-<hash>.ckpt, the hash of the program."""
    (path,) = root.glob("last-preempted-*.ckpt")
    return path


def record(root: Path, at: int, results: list[subprocess.CompletedProcess]) -> Stage:
    stage = Stage(root, at, results)
    if all((root / f"stopped.rank{rank}.json").exists() for rank in range(2)):
        stage.steps = stopped_steps(root)
        stage.saved_step = checkpoint_step(preempted_file(root))
        for rank in range(2):
            (root / f"stopped.rank{rank}.json").unlink()
    return stage


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict[str, Stage]:
    root = tmp_path_factory.mktemp("preempted")
    fake = root / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {root / "scontrol.log"}\n')
    (fake / "scontrol").chmod(0o755)

    def slurm(**more: str) -> dict[str, str]:  # sbatch's variables, a port of the job's own, and the fake
        return {
            "PATH": f"{fake}:{os.environ['PATH']}",
            "SLURM_JOB_ID": JOB,
            "MASTER_PORT": str(find_free_port()),
            **more,
        }

    draw = random.Random()
    stages: dict[str, Stage] = {}
    at = draw.randint(3, 12)
    # Here the ranks exchange stop requests every ~20 ms of training (a few steps, the interval
    # adapting to the step time, as by default every ~250 ms); in the other runs after every step.
    stages["agent"] = record(
        root,
        at,
        [
            run_script(
                root, "--signal", "SIGTERM", "--at", str(at), "--to", "agent", "--exchange-every", "0.02", forked=True
            )
        ],
    )
    # "every" and "requeued" save in the background (AsyncCheckpointIO): the stop waits for the
    # periodic save in flight, and the chain's end matches the run never stopped across both kinds.
    for name, sig, saves in (("every", "SIGTERM", ["--async-saves"]), ("usr1", "SIGUSR1", [])):
        if stages[list(stages)[-1]].saved_step is None:
            return stages  # the chain broke: the tests of what follows fail on a missing stage
        at = stages[list(stages)[-1]].saved_step + draw.randint(3, 10)
        stages[name] = record(
            root,
            at,
            run_slurm_tasks(
                root, "--signal", sig, "--at", str(at), "--to", "workers", "--exchange-every", "0", *saves, env=slurm()
            ),
        )
    if stages["usr1"].saved_step is not None:
        stages["requeued"] = record(
            root, MAX_STEPS, run_slurm_tasks(root, "--async-saves", env=slurm(SLURM_RESTART_COUNT="1"))
        )
    return stages


def check_stopped(stage: Stage, signal_name: str) -> None:
    assert all(r.returncode == PREEMPTED for r in stage.results), stage.explain()
    # Every rank stopped after one and the same step, later than the signal (the ranks agree a
    # step late), and the checkpoint holds that step.
    assert len(set(stage.steps)) == 1 and stage.steps[0] > stage.at, stage.explain()
    assert stage.saved_step == stage.steps[0], stage.explain()
    said = "".join(r.stderr for r in stage.results)
    assert f"stopped by {signal_name}: every process stopped after step {stage.saved_step}" in said, stage.explain()
    assert "exit status 75" in said, stage.explain()


def test_sigterm_to_the_agent_saves_the_stop_step_and_exits_75(chain):
    check_stopped(chain["agent"], "SIGTERM")


def test_sigterm_to_every_slurm_task_saves_the_stop_step_and_exits_75(chain):
    stage = chain["every"]
    check_stopped(stage, "SIGTERM")
    assert "the previous run was preempted: resuming from" in stage.results[0].stderr, stage.explain()
    # SIGTERM (scancel, SLURM's own preemption) never requeues: only SIGUSR1 asks for it. (Lightning's
    # "SLURM auto-requeueing enabled." line is said at every stage under SLURM, as Lightning says it.)
    assert "requeued SLURM job" not in stage.results[0].stderr, stage.explain()


def test_slurm_sigusr1_saves_and_requeues_the_job_once(chain):
    stage = chain["usr1"]
    check_stopped(stage, "SIGUSR1")
    log = stage.root / "scontrol.log"
    assert log.read_text().splitlines() == [f"requeue {JOB}"], stage.explain()
    assert f"requeued SLURM job {JOB} (scontrol requeue {JOB})" in stage.results[0].stderr, stage.explain()


def test_the_requeued_job_resumes_and_ends_bit_identical_to_a_run_never_stopped(chain, ddp_reference):
    stage = chain["requeued"]
    assert [r.returncode for r in stage.results] == [0, 0], stage.explain()
    assert f"SLURM requeue 1 of job {JOB}: resuming from" in stage.results[0].stderr, stage.explain()
    assert same_weights(torch.load(stage.root / "weights.pt"), ddp_reference), stage.explain()
    # Finished: the preemption checkpoint is retired, so that the next run starts afresh.
    assert not list(stage.root.glob("last-preempted*"))


def one_process_fit(root: Path) -> dict[str, torch.Tensor]:
    """preemption_run.py's fit on one device, in this process, with ckpt_path=None."""
    from preemption_run import DropoutNet, build_trainer, train_loader

    tm.seed_everything(0)
    model = DropoutNet()
    build_trainer(root, devices=1, max_steps=MAX_STEPS).fit(model, train_loader())
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_sigterm_on_one_process_saves_exits_75_and_the_rerun_resumes_exactly(tmp_path, caplog, monkeypatch):
    at = random.randint(3, 40)
    stopped = run_script(
        tmp_path, "--devices", "1", "--signal", "SIGTERM", "--at", str(at), "--to", "self", forked=True
    )
    context = f"SIGTERM after step {at}\n{stopped.stdout[-1500:]}\n{stopped.stderr[-3000:]}"
    assert stopped.returncode == PREEMPTED, context
    assert f"stopped by SIGTERM: training stopped after step {at}" in stopped.stderr, context
    assert stopped_steps(tmp_path, world=1) == [at], context  # one process: no step of delay
    saved = preempted_file(tmp_path)  # the program's own name
    assert checkpoint_step(saved) == at, context

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    # the same script run again, here: fit(ckpt_path=None) with the stopped run's command line
    as_restart_of(monkeypatch, saved, argv=[RUN, str(tmp_path)])
    resumed = one_process_fit(tmp_path)
    assert f"the previous run was preempted: resuming from {saved}" in said(caplog)
    assert same_weights(resumed, one_process_fit(tmp_path / "never_stopped")), context
    assert not list(tmp_path.glob("last-preempted*"))
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers  # fit's handlers are gone again


AGENT_RUNS = """
import sys
from trainmesh.launchers.elastic import run_agent
for code in sys.argv[1:]:
    try:
        run_agent(["-c", code], devices=2, num_nodes=1)
    except SystemExit as end:
        print("status", end.code, flush=True)
"""


def test_the_agent_names_the_signal_that_ended_the_run_in_its_message_and_status(tmp_path):
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    # SIGTERM to the agent while its workers are outside fit: nothing saved, so not 75, and not Ctrl-C's 130.
    terminated = "import os, signal, time; os.kill(os.getppid(), signal.SIGTERM); time.sleep(60)"
    # A native crash inside a worker (as torch's or gloo's would be), without a core file.
    crashed = "import ctypes, resource; resource.setrlimit(resource.RLIMIT_CORE, (0, 0)); ctypes.string_at(0)"
    runs = [killed, terminated, crashed]
    done = run_code_forked(AGENT_RUNS, runs, timeout=120, without=launcher_variables(), cwd=tmp_path)
    context = f"{done.stdout}\n{done.stderr[-3000:]}"
    assert done.stdout.split() == ["status", "137", "status", "143", "status", "139"], context
    assert "was killed by SIGKILL (signal 9)" in done.stderr and "Exit status 137" in done.stderr, context
    assert "died by SIGSEGV (signal 11): a native crash inside the worker" in done.stderr, context
    assert "PYTHONFAULTHANDLER=1" in done.stderr and "Exit status 139" in done.stderr, context
    assert "stopped by SIGTERM, and every worker with it, before a checkpoint was saved" in done.stderr, context


def test_requeue_without_scontrol_says_what_to_do(tmp_path, monkeypatch):
    from trainmesh.launchers.environments import requeue_slurm_job

    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol there
    said = requeue_slurm_job({"SLURM_JOB_ID": JOB})
    assert said is not None and "NOT requeued" in said and f"scontrol requeue {JOB}" in said
    assert requeue_slurm_job({}) is None  # not a SLURM job: nothing to requeue
