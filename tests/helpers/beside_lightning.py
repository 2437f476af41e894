"""One ddp program run under Lightning 2.6 and under trainmesh, each writing its records under
``out/<framework>``: Lightning's first process a fork of the fork server (helpers/forked.py: torch
already imported, 1.5 CPU-s of the launch's 12), its ddp starting the second process itself as a new
interpreter, as its owners define it; trainmesh's on 2 forks in one process group. Neither sees a
PL_GLOBAL_SEED from outside."""

from __future__ import annotations

import os
from pathlib import Path

from helpers.forked import can_fork, run_forked
from helpers.processes import run_program
from trainmesh.launchers.environments import find_free_port

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run_beside_lightning(
    script: Path,
    out: Path,
    *,
    lightning_ranks: int = 1,
    lightning_starts: bool = True,
    imports: tuple[str, ...] = ("lightning.pytorch",),
) -> None:
    """``script lightning|trainmesh <folder>`` under both frameworks; asserts both ended well.

    Two ways to run Lightning's ranks without its launcher starting a new interpreter (5 CPU-s
    each: torch, Lightning and dynamo imported again), for a comparison of what the run computes:
    ``lightning_ranks`` > 1: that many forks with torchrun's variables (helpers/forked.py's
    ``torchrun``), as ``torchrun --nproc-per-node N script`` starts them (Lightning then reads a
    TorchElasticEnvironment), the ``imports`` the script makes under Lightning (``lightning.pytorch``,
    ``lightning.fabric``) made once before those forks (helpers/forked.py's ``preload``: 2.6 CPU-s
    each), never in trainmesh's run; ``lightning_starts=False``: 2 forks in one process group (the
    ``imports`` made once before them, as for torchrun's) with
    ``LOCAL_RANK`` set, its Trainer or Fabric finding its processes started while its cluster
    environment stays the LightningEnvironment of a plain ddp run (what a program reading
    ``trainer.strategy.cluster_environment`` or the launcher sees, as trainmesh's side)."""
    env = {k: v for k, v in os.environ.items() if k != "PL_GLOBAL_SEED"}
    env["PYTHONPATH"] = os.pathsep.join([SRC, env.get("PYTHONPATH", "")])
    # Lightning's ddp picks its own port, which a launch running beside it on the other xdist worker
    # may hold (EADDRINUSE, and its second process then waits for ever): give it a free one.
    env["MASTER_PORT"] = str(find_free_port())
    theirs = [str(script), "lightning", str(out / "lightning")]
    if can_fork():  # rank 0 a fork (torch imported); Lightning's ddp starts rank 1 as a new interpreter
        if lightning_ranks > 1:
            ranks: dict = {"world": lightning_ranks, "torchrun": True, "preload": imports}
        elif lightning_starts:
            ranks = {"world": 1}
        else:  # the imports made once before the 2 forks, as for torchrun's (2.6 CPU-s a rank)
            ranks = {"world": 2, "preload": imports}
        done = run_forked(script, theirs[1:], env=env, timeout=600, cwd=out, **ranks)
    else:
        done = run_program(theirs, timeout=600, cwd=out, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    ours = [str(script), "trainmesh", str(out / "trainmesh")]
    if can_fork():
        done = run_forked(script, ours[1:], env=env, timeout=600, cwd=out, world=2)
    else:
        done = run_program(ours, timeout=600, cwd=out, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
