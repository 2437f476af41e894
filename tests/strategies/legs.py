"""Running one leg of a multi-process test (a program of ddp_run.py) with a hard timeout."""

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1]))

from helpers.batches import WORKERS  # noqa: E402
from helpers.forked import can_fork, run_forked  # noqa: E402
from helpers.processes import run_program  # noqa: E402

HERE = Path(__file__).parent
SCRIPT = HERE / "ddp_run.py"
# A forked program's workers are forks of it too (for programs whose processes' start is not tested).
FORK_WORKERS = {WORKERS: "fork"} if can_fork() else {}


def run(
    *args: str, timeout: float = 120, env: dict | None = None, forked: bool = False, world: int = 1
) -> subprocess.CompletedProcess:
    """Run a leg in its own session; on timeout kill the whole session so no worker outlives it.
    ``forked``: the program (``args[0]``) starts as a fork of this process (helpers/forked.py),
    where it can: for a leg that measures neither memory nor how its processes start; with
    ``world`` > 1, as ``world`` forks in one process group, which its Trainer uses as torchrun's."""
    if forked and can_fork():
        environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
        return run_forked(HERE / args[0], list(args[1:]), env=environment, timeout=timeout, cwd=HERE, world=world)
    return run_program(list(args), timeout=timeout, env=env, cwd=HERE)


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path)["state_dict"]


def run_torchrun_nodes(
    leg: list[str], outs: list[Path], *, timeout: float = 120, script: Path = SCRIPT, forked_agents: bool = False
) -> None:
    """One torchrun agent per node on 127.0.0.1 (``--nnodes len(outs)``, one process each), node
    R's program ``SCRIPT LEG[0] OUTS[R] LEG[1:]``; a LEG of ``--batch SPEC`` (helpers/batches.py:
    several legs one after another in one process group, each naming its own output) is every
    node's whole argv. ``forked_agents``: each agent is a fork of the fork server running torchrun's main (this
    file's ``__main__``: no second import of torch) where it can be; its worker is torchrun's new
    interpreter all the same."""
    from trainmesh.launchers.environments import find_free_port

    port = str(find_free_port())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def torchrun(rank: int, out: Path) -> list[str]:
        node = ["--nnodes", str(len(outs)), "--nproc-per-node", "1", "--node-rank", str(rank)]
        argv = leg if leg[0] == "--batch" else [leg[0], str(out), *leg[1:]]
        return [*node, "--master-addr", "127.0.0.1", "--master-port", port, str(script), *argv]

    if forked_agents and can_fork():
        with ThreadPoolExecutor(len(outs)) as pool:  # all at once: each waits for the others at the rendezvous
            agents = pool.map(
                lambda node: run_forked(Path(__file__), torchrun(*node), env=env, timeout=timeout, cwd=HERE),
                enumerate(outs),
            )
            for agent in list(agents):
                assert agent.returncode == 0, agent.stderr[-3000:]
        return
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", *torchrun(rank, out)],
            cwd=HERE,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for rank, out in enumerate(outs)
    ]
    for node in nodes:
        try:
            _, err = node.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for each in nodes:
                os.killpg(each.pid, signal.SIGKILL)
            raise
        assert node.returncode == 0, err[-3000:]


if __name__ == "__main__":  # torchrun's agent, as ``python -m torch.distributed.run ARGS`` (forked_agents)
    from torch.distributed.run import main

    main()
