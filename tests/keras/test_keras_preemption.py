"""SIGTERM during trainmesh.keras.fit at 2 gloo processes: every process stops after the same batch, rank 0
alone saves the run's state, the run exits 75, and the same script run again resumes by itself and ends
bit-identical (weights, optimizer state, History) to the fit never stopped.

Two launches of keras_preemption_run.py: the stopped one (SIGTERM to trainmesh's agent after a random
global batch, usually mid-epoch), then the rerun, which also fits the reference in fresh folders.
"""

import importlib.util
import os
import pickle
import random
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).parent
SCRIPT = HERE / "keras_preemption_run.py"
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "launchers"))

from preemption_helpers import launcher_variables  # noqa: E402

from helpers.forked import can_fork, run_forked  # noqa: E402
from helpers.processes import run_program  # noqa: E402

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("keras") is None,
        reason="the keras extra is not installed (pip install trainmesh[keras])",
    ),
    pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals"),
]

PREEMPTED = 75
BATCHES_PER_EPOCH = 8  # keras_preemption_run.py: 128 training samples, 2 processes, batch 8


def launch(root: Path, stop_at: int | None = None):
    """``[STOP_AT=AT] python keras_preemption_run.py ROOT``. The stopped run: the agent (trainmesh's, which
    gets the SIGTERM and forwards it) a fork of the fork server (torch and trainmesh imported:
    helpers/forked.py), its workers new interpreters started as under strategy="ddp": what the signal
    reaches is real. The rerun (about what the resumed fit trains, not how its processes start): its 2
    processes forks of the program's first (helpers/forked.py's world=2, ddp_fork), as the ones the agent
    would start, with the same command line, variables and folders, without importing torch, dynamo and
    Keras again (about 6 CPU-s each). Where there is no fork server, new interpreters both times."""
    env = {"KERAS_BACKEND": "torch", "STOP_AT": "" if stop_at is None else str(stop_at)}
    if can_fork():
        without = launcher_variables()
        environment = {k: v for k, v in os.environ.items() if k not in without}
        environment = {**environment, "OMP_NUM_THREADS": "1", **env}
        world = 1 if stop_at is not None else 2
        return run_forked(SCRIPT, [str(root)], env=environment, timeout=300, cwd=root, world=world)
    return run_program([str(SCRIPT), str(root)], timeout=300, env=env, without=launcher_variables(), cwd=root)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("keras_preempted")
    at = random.randint(3, 12)
    stopped = launch(root, at)
    saved = sorted(root.glob("**/last-preempted-*.ckpt"))
    state = pickle.loads(saved[0].read_bytes()) if len(saved) == 1 else None
    return {"root": root, "at": at, "stopped": stopped, "saved": saved, "state": state, "rerun": launch(root)}


def explain(runs: dict) -> str:
    parts = [f"SIGTERM after global batch {runs['at']}, saved {runs['saved']}"]
    for name in ("stopped", "rerun"):
        result = runs[name]
        parts.append(f"--- {name}: exit {result.returncode}\n{result.stdout[-1500:]}\n{result.stderr[-3000:]}")
    return "\n".join(parts)


def test_sigterm_stops_every_process_after_one_batch_saves_on_rank_0_and_exits_75(runs):
    assert runs["stopped"].returncode == PREEMPTED, explain(runs)
    said = runs["stopped"].stderr
    assert "stopped by SIGTERM: every process stopped after step" in said and "exit status 75" in said, explain(runs)
    step = int(said.split("every process stopped after step ")[1].split()[0])
    assert step > runs["at"], explain(runs)  # the ranks agree a batch or more after the signal
    # Rank 0 alone wrote (each worker ran in a folder of its own), at the batch every process stopped after.
    root = runs["root"]
    assert [p.relative_to(root).parts[0] for p in runs["saved"]] == ["cwd.rank0"], explain(runs)
    state = runs["state"]
    assert state["epoch"] * BATCHES_PER_EPOCH + state["batches"] == step, explain(runs)
    assert [logs["epoch"] for logs in state["logs"]] == list(range(state["epoch"])), explain(runs)
    assert len(state["ranks"]) == 2  # each process's metric totals and random generators
    assert list(state["other_optimizers"]) == ["head_optimizer"] and not state["unnamed_optimizers"], explain(runs)


def test_the_rerun_resumes_and_ends_bit_identical_to_the_fit_never_stopped(runs):
    rerun, root = runs["rerun"], runs["root"]
    assert rerun.returncode == 0, explain(runs)
    assert f"the previous run was preempted: resuming from {runs['saved'][0]}" in rerun.stderr, explain(runs)
    reference = torch.load(root / "reference.rank0", weights_only=False)
    assert reference["epoch"] == [0, 1, 2]
    for name in ("resumed.rank0", "resumed.rank1", "reference.rank1"):
        result = torch.load(root / name, weights_only=False)
        assert result["variables"].keys() == reference["variables"].keys()
        for path, value in result["variables"].items():
            assert np.array_equal(value, reference["variables"][path]), (name, path)
        assert len(result["optimizer"]) == len(reference["optimizer"]) > 0
        assert all(np.array_equal(a, b) for a, b in zip(result["optimizer"], reference["optimizer"])), name
        # The optimizer the custom train_step applies besides model.optimizer resumed with its state.
        assert len(result["head_optimizer"]) == len(reference["head_optimizer"]) > 0
        assert all(np.array_equal(a, b) for a, b in zip(result["head_optimizer"], reference["head_optimizer"])), name
        assert result["history"] == reference["history"], name  # every epoch, the ones before the stop too
        assert result["epoch"] == reference["epoch"], name


def test_a_fit_that_finishes_removes_the_saved_state(runs):
    assert runs["rerun"].returncode == 0, explain(runs)
    assert not list(runs["root"].glob("**/last-preempted*")), explain(runs)
    assert not list(runs["root"].glob("**/trainmesh_keras")), explain(runs)  # its empty folders too
    assert "removed" in runs["rerun"].stderr and "the preempted run's checkpoint" in runs["rerun"].stderr
