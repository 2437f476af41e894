"""Restarts: ``Trainer(max_restarts=N)`` (trainmesh's agent) and ``torchrun --max-restarts N``
start the workers again after one dies, and they resume from the newest complete checkpoint by
themselves (fit with ckpt_path=None): the run ends bit-identical to one that never failed.

On gloo a restart hangs or fails most of the time while torch's agent shares its rendezvous store
with the workers (pytorch/pytorch#135712): trainmesh's agent turns the sharing off; under torchrun
the user sets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, as here.

The suite runs each launcher once. ``python tests/launchers/test_restarts.py [N]`` runs both N
times in a row (default 10) and prints how many ended bit-identical, and how long each took.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from preemption_helpers import run_script, same_weights
from preemption_run import CHECKPOINT_EVERY

import trainmesh as tm

DIE_AT = 30  # the last rank dies before step 31, on the first attempt only (last checkpoint: step 24)
TORCHRUN = ("--standalone", "--nproc-per-node", "2", "--max-restarts", "2")


def run_with_a_death(root: Path, launcher: str) -> subprocess.CompletedProcess:
    # Either agent a fork that imported torch and trainmesh (trainmesh's: the script; torchrun's:
    # torchrun_run.py); the workers it starts, and starts again, new interpreters.
    if launcher == "trainmesh":
        return run_script(root, "--die-at", str(DIE_AT), "--max-restarts", "2", timeout=150, forked=True)
    share = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    return run_script(root, "--die-at", str(DIE_AT), torchrun=TORCHRUN, timeout=150, env=share, forked=True)


def problem(root: Path, done: subprocess.CompletedProcess, reference: dict[str, torch.Tensor]) -> str | None:
    """What went wrong with a run that should have died once, restarted and ended exactly; None if nothing."""
    if done.returncode != 0:
        return f"exit status {done.returncode}"
    if not (root / "died.json").exists() or json.loads((root / "died.json").read_text())["step"] != DIE_AT:
        return "no rank died: the restart was not exercised"
    resumed = f"restart 1 of the elastic agent: resuming from {root / 'checkpoints' / 'last.ckpt'}"
    if resumed not in done.stderr:  # logged, as Lightning's lines
        return f"the restarted workers did not say {resumed!r}"
    started = json.loads((root / "started.1.json").read_text())["global_step"]
    if started != DIE_AT // CHECKPOINT_EVERY * CHECKPOINT_EVERY:
        return f"the restart started at step {started}, not at the newest checkpoint's"
    if not same_weights(torch.load(root / "weights.pt"), reference):
        return "the weights differ from the run that never failed"
    return None


@pytest.mark.parametrize("launcher", ["trainmesh", "torchrun"])
def test_a_rank_that_dies_once_is_restarted_and_the_run_ends_bit_identical(launcher, tmp_path, ddp_reference):
    done = run_with_a_death(tmp_path, launcher)
    found = problem(tmp_path, done, ddp_reference)
    assert found is None, f"{found}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def test_max_restarts_is_checked_and_says_where_restarts_come_from():
    with pytest.raises(ValueError, match="max_restarts=-1 must be an integer >= 0"):
        tm.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_restarts=-1)
    # One process has no agent to restart it: the fix is torchrun's own option.
    with pytest.raises(ValueError, match="torchrun --max-restarts"):
        tm.Trainer(accelerator="cpu", devices=1, max_restarts=2)
    with pytest.raises(ValueError, match="strategy='ddp'"):
        tm.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_restarts=2)


def main(times: int) -> None:
    """Both launchers ``times`` times in a row against one reference run; prints a summary."""
    from preemption_helpers import RUN, launcher_variables

    from helpers.processes import run_program

    with tempfile.TemporaryDirectory() as folder:
        reference_root = Path(folder) / "reference"
        reference_root.mkdir()
        run_program([RUN, str(reference_root), "--strategy", "ddp_fork"], timeout=120, without=launcher_variables())
        reference = torch.load(reference_root / "weights.pt")
        for launcher in ("trainmesh", "torchrun"):
            good, seconds = 0, []
            for attempt in range(times):
                root = Path(folder) / f"{launcher}{attempt}"
                root.mkdir()
                start = time.monotonic()
                try:
                    found = problem(root, run_with_a_death(root, launcher), reference)
                except subprocess.TimeoutExpired:
                    found = "hung: killed after 150 s"
                seconds.append(time.monotonic() - start)
                good += found is None
                print(f"{launcher} run {attempt + 1}: {found or 'bit-identical'} ({seconds[-1]:.1f} s)", flush=True)
            print(
                f"{launcher}: {good}/{times} bit-identical, none hung: {max(seconds) < 150} (max {max(seconds):.1f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
