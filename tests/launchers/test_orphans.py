"""A ddp run's workers die with their agent: SIGKILL the agent (the script the user started,
which re-ran itself as the workers) and no worker may go on training and writing checkpoints."""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from helpers.forked import can_fork, start_forked

HERE = Path(__file__).parent
LAUNCHER_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS",
    "SLURM_PROCID",
)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


@pytest.mark.skipif(not can_fork(), reason="SIGKILL, the elastic agent and the fork server are POSIX-only here")
def test_workers_die_when_the_agent_is_killed(tmp_path):
    out = tmp_path / "pid"
    env = {k: v for k, v in os.environ.items() if k not in (*LAUNCHER_VARIABLES, "OMP_NUM_THREADS")}
    env["OMP_NUM_THREADS"] = "1"
    # The agent a fork that imported torch and trainmesh already (helpers/forked.py: its own session,
    # environment and output), not a new interpreter importing them: what is tested is its workers'
    # end when it dies, and they are new interpreters it starts all the same (their PR_SET_PDEATHSIG
    # set up in them). A real interpreter's agent: test_launch_processes.py, test_cli_processes.py.
    agent = start_forked(HERE / "orphan_run.py", [str(out)], env=env, cwd=tmp_path)
    workers: list[int] = []
    ended = None
    try:
        deadline = time.monotonic() + 60
        files = [Path(f"{out}.rank{rank}") for rank in range(2)]
        while not all(file.exists() for file in files):
            if agent.poll() is not None:
                ended = agent.wait(timeout=10)
                pytest.fail(f"the run ended (exit {ended.returncode}) before training started:\n{ended.stderr[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail("the workers did not start training within 60 s")
            time.sleep(0.1)
        places = [json.loads(file.read_text()) for file in files]
        workers = [place["pid"] for place in places]
        assert [place["ppid"] for place in places] == [agent.pid, agent.pid]  # the agent started them

        os.kill(agent.pid, signal.SIGKILL)  # the agent alone, as the kernel's OOM killer would
        ended = agent.wait(timeout=30)  # reaped (a hang guard only)
        killed = time.monotonic()
        while any(alive(pid) for pid in workers) and time.monotonic() - killed < 5:
            time.sleep(0.05)
        survivors = [pid for pid in workers if alive(pid)]
        assert not survivors, f"workers {survivors} outlived their agent by 5 s"
    finally:
        # Never leave a process behind: the session holds the agent and (unless they escaped
        # it) the workers; kill any worker by pid as well.
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if ended is None:  # its session, if it still runs, and its output folder
            agent.kill()
            agent.wait(timeout=10)
