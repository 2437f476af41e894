"""Start preemption_run.py as users and schedulers do (python, torchrun, SLURM's tasks) and read
what it left behind; shared by test_preemption and test_restarts."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))  # tests/, for helpers (test_restarts.py runs as a script too)
from preemption_run import OPTIONS  # noqa: E402

from helpers.forked import can_fork, run_forked  # noqa: E402
from helpers.processes import run_program  # noqa: E402

RUN = str(HERE / "preemption_run.py")
TORCHRUN_RUN = HERE / "torchrun_run.py"
MAX_STEPS = 60  # preemption_run.py's default
LAUNCHER_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TRAINMESH_ELASTIC_AGENT",
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE",
)


def launcher_variables() -> tuple[str, ...]:
    """The variables that would tell a program that torchrun or SLURM started it: the tests'
    programs must start as a user's do (pytest itself may run inside a SLURM job)."""
    return tuple(k for k in os.environ if k in LAUNCHER_VARIABLES or k.startswith(("SLURM_", "TORCHELASTIC_")))


def run_script(
    root: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    torchrun: tuple[str, ...] | None = None,
    forked: bool = False,
) -> subprocess.CompletedProcess:
    """``python preemption_run.py ROOT ARGS`` (or under ``torchrun`` with those options) in a clean
    environment; the whole session is killed on timeout. ``forked``: the script (under torchrun:
    torchrun's agent, torchrun_run.py) runs as a fork of the fork server (helpers/forked.py), which
    imported torch and trainmesh already; a script of several devices is then the elastic agent, as
    started by ``python``, and its workers (torchrun's too) are new interpreters all the same."""
    command, env = [RUN, str(root)], {**(env or {}), **test_options(args)}
    if forked and can_fork():
        clean = {k: v for k, v in os.environ.items() if k not in launcher_variables()}
        environment = {**clean, "OMP_NUM_THREADS": "1", **env}
        if torchrun is not None:  # torchrun's agent the fork (torchrun_run.py), its workers new interpreters
            return run_forked(TORCHRUN_RUN, [*torchrun, *command], env=environment, timeout=timeout, cwd=root)
        return run_forked(Path(RUN), command[1:], env=environment, timeout=timeout, cwd=root)
    if torchrun is not None:
        command = ["-m", "torch.distributed.run", *torchrun, *command]
    return run_program(command, timeout=timeout, env=env, without=launcher_variables(), cwd=root)


def test_options(args: tuple[str, ...]) -> dict[str, str]:
    """The test's options for preemption_run.py, given in its environment, not its command line: each run of
    a chain is the same command run again, as a user reruns a preempted job (a checkpoint records its command
    line, and an automatic resume takes only its own program's: trainer/run_identity.py)."""
    return {OPTIONS: shlex.join(args)}


def run_slurm_tasks(
    root: Path, *args: str, env: dict[str, str], tasks: int = 2, timeout: float = 120
) -> list[subprocess.CompletedProcess]:
    """``srun --ntasks-per-node=TASKS python preemption_run.py ROOT ARGS`` on one node, as SLURM
    starts it: one process per task with SLURM's variables, and no agent."""
    base = {k: v for k, v in os.environ.items() if k not in launcher_variables()}
    common = {
        **base,
        "OMP_NUM_THREADS": "1",
        "SLURM_NTASKS": str(tasks),
        "SLURM_NTASKS_PER_NODE": str(tasks),
        "SLURM_NODEID": "0",
        "SLURM_JOB_NAME": "train",
        "SLURM_NODELIST": "localhost",
        "MASTER_ADDR": "127.0.0.1",
        **env,
        **test_options(args),
    }
    tasks_env = [{**common, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)} for rank in range(tasks)]
    if can_fork():
        # Each task a fork of the fork server (helpers/forked.py: its own session, environment,
        # output and exit status), not a new interpreter importing torch and trainmesh: the
        # preemption reads SLURM's variables and the signals, not how the process started. All
        # at once: each waits for the others' rendezvous.
        with ThreadPoolExecutor(tasks) as pool:
            return list(
                pool.map(lambda env: run_forked(Path(RUN), [str(root)], env=env, timeout=timeout, cwd=root), tasks_env)
            )
    processes = [
        subprocess.Popen(
            [sys.executable, RUN, str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=root,
            start_new_session=True,
            env=env,
        )
        for env in tasks_env
    ]
    deadline = time.monotonic() + timeout
    results = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    finally:
        for process in processes:  # none outlives the test, whatever happened
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
    return results


def stopped_steps(root: Path, world: int = 2) -> list[int]:
    """The step each rank reported in the Preempted it raised."""
    return [json.loads((root / f"stopped.rank{rank}.json").read_text())["step"] for rank in range(world)]


def checkpoint_step(path: Path) -> int:
    return torch.load(path, weights_only=False)["global_step"]


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
