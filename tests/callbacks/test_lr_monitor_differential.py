"""LearningRateMonitor against Lightning 2.6's, through the differential harness
(tests/helpers/differential.py): the same program under both, with the monitor at each
``logging_interval`` (and momentum and weight decay logged), one or two param groups, two
optimizers (manual optimization), step and epoch schedulers and accumulation. The rows of
metrics.csv (steps and values), the metrics a callback reads, the learning rates each step trained
with and the weights are compared; the monitor's own record of what it logged too.
"""

from __future__ import annotations

import pytest

from helpers.differential import Program, differences, run

pytest.importorskip("lightning.pytorch")

IGNORED_KEYS = ("loops", "pytorch-lightning_version", "epoch_metrics", "format", "hyper_parameters", "loop")
IGNORED_KEYS += ("per_rank", "precision", "rng", "train_results", "trainmesh_version", "trainmesh_run")

SHORT = dict(max_epochs=2, limit_train_batches=3, limit_val_batches=1)
CASES = {
    "step": (Program(lr_monitor="step"), dict(SHORT, log_every_n_steps=1)),
    "step_every_2": (Program(lr_monitor="step", scheduler="step"), dict(SHORT, log_every_n_steps=2)),
    "epoch": (Program(lr_monitor="epoch", scheduler="epoch"), dict(SHORT, log_every_n_steps=1)),
    "scheduler_step": (Program(lr_monitor="scheduler", scheduler="step"), dict(SHORT, log_every_n_steps=1)),
    "scheduler_epoch": (Program(lr_monitor="scheduler", scheduler="epoch"), dict(SHORT, log_every_n_steps=2)),
    "two_param_groups": (
        Program(lr_monitor="step", param_groups=2, scheduler="epoch"),
        dict(SHORT, log_every_n_steps=1),
    ),
    "two_optimizers": (Program(lr_monitor="step", manual=True), dict(SHORT, log_every_n_steps=1)),
    "accumulate": (
        Program(lr_monitor="step", scheduler="step"),
        dict(SHORT, limit_train_batches=4, accumulate_grad_batches=2, log_every_n_steps=1),
    ),
    # a stop asked before min_steps: every batch logs (Lightning's should_update_logs)
    "stop_asked": (Program(lr_monitor="step", stop_at_batch=0), dict(SHORT, min_steps=3, log_every_n_steps=50)),
    # log_every_n_steps=0: no step rows (Lightning's should_update_logs is False), the epoch's still written
    "never_every_n_steps": (Program(lr_monitor="scheduler", scheduler="epoch"), dict(SHORT, log_every_n_steps=0)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lr_monitor_logs_lightnings_rows(tmp_path, case):
    program, settings = CASES[case]
    theirs = run("lightning", program, tmp_path / "pl", **settings)
    ours = run("trainmesh", program, tmp_path / "tm", **settings)
    assert any(any(k.startswith("lr-") for k in row) for row in theirs.csv_rows)
    assert differences(ours, theirs, ignore_checkpoint_keys=IGNORED_KEYS) == {}
