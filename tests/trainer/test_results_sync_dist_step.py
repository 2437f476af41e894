"""A step value logged with ``sync_dist=True`` is reduced across processes with its ``reduce_fx``,
as Lightning's ``_ResultMetric`` syncs it (reduced from Lightning's own
tests/tests_pytorch/trainer/logging_/test_train_loop_logging.py::test_logging_sync_dist_true[2-cpu]).

Before: trainmesh reduced every synced step value with "mean", whatever its ``reduce_fx``: under ddp_spawn
at 2 processes ``self.log("foo", 1 + rank, on_step=True, on_epoch=False, sync_dist=True, reduce_fx="sum")``
read 1.5 in ``trainer.callback_metrics`` where Lightning 2.6.6 reads 3 (and "max" read the mean 1.5).
A float16 / bfloat16 step value is reduced in float32, as Lightning's ``_ResultMetric.update`` casts it
before its sync (before: reduced in float16: 1 + 2**-10 and 1 gave 1.0 where Lightning gives 1.00048828125;
found in /work/progs/l-ddp-progs4 g2, metrics.csv ``f16_step``).
The same launch checks that what ``on_train_epoch_start`` / ``on_validation_epoch_start`` log is read in
that epoch's ``on_*_epoch_end`` reduced as Lightning reduces it (before: the validation's was not there yet),
and that ``sync_dist_group`` holding every process (``new_group([0, 1])``, torch's ``group.WORLD``) reduces as
Lightning's (before: refused; found in /work/progs/l-ddp-progs9 r3), and that a group of rank 0 alone
(``new_group([0])``) reduces ``self.log``, ``strategy.reduce`` and ``all_gather`` over it as Lightning's on
each rank: rank 0 over itself, rank 1 (outside) its own value for "sum"/"max", and a mean or a gather
stops (Lightning's with torch's errors, trainmesh's naming the group; before: refused in ``self.log``,
and trainmesh's ``strategy.reduce`` mean on rank 1 divided by torch's -1 size: -4.0 for 4.0).

Each framework's run (results_sync_dist_step_run.py) is a fork of the fork server (helpers/forked.py)
whose Trainer runs ``ddp_fork``: the launcher ``ddp_spawn`` uses, with fork for spawn, in Lightning as in
trainmesh (the reduction runs in the workers alike, and rank 0's metrics come back to the parent the
same way). Under ddp_spawn from this process the test started 4 interpreters, each importing torch,
Lightning and trainmesh again: 40 CPU-s for the file alone, 21.8 s of a clean-clone CI run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers.forked import can_fork, run_forked
from helpers.processes import run_program

pytest.importorskip("lightning.pytorch")

PROGRAM = Path(__file__).with_name("results_sync_dist_step_run.py")
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _metrics(framework: str, root: Path) -> dict[str, float]:
    out = root / f"{framework}.json"
    env = {k: v for k, v in os.environ.items() if k != "PL_GLOBAL_SEED"}
    env["PYTHONPATH"] = os.pathsep.join([SRC, env.get("PYTHONPATH", "")])
    if can_fork():
        done = run_forked(PROGRAM, [framework, str(out)], env=env, timeout=600, cwd=root)
    else:
        done = run_program([str(PROGRAM), framework, str(out)], timeout=600, cwd=root, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_a_synced_step_value_is_reduced_with_its_reduce_fx(tmp_path):
    theirs = _metrics("lightning", tmp_path)
    assert theirs["step_sum"] == 3.0 and theirs["step_max"] == 2.0
    assert theirs["step_f16"] == 1.00048828125
    # sync_dist_group of every process (a new_group of both ranks, torch's WORLD): before, trainmesh refused it
    assert (theirs["group_sum_step"], theirs["group_sum_epoch"], theirs["world_max"]) == (3.0, 6.0, 2.0)
    # a group of rank 0 alone: rank 0 over itself, rank 1 outside it (its own value; a mean or a gather stops)
    outside = {k[len("rank1_") :]: v for k, v in theirs.items() if k.startswith("rank1_")}
    assert outside == {"first_sum_epoch": 4.0, "first_max": 3.0, "reduce_sum": 2.0, "reduce_mean": -1.0, "gather": -1.0}
    assert (theirs["first_sum_step"], theirs["rank0_reduce_mean"], theirs["rank0_gather"]) == (1.0, 3.0, 5.0)
    # on_*_epoch_start's values in that epoch's on_*_epoch_end: synced where logged with sync_dist, else rank 0's
    assert (theirs["seen_opened_sum"], theirs["seen_val_opened"], theirs["seen_val_opened_own"]) == (3.0, 2.0, 1.0)
    assert _metrics("trainmesh", tmp_path) == theirs
