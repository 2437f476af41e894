"""The differential harness: one small program run under Lightning 2.6 and under trainmesh with the
same Trainer settings, compared as data (tests/helpers/differential.py): the callback hooks called
(with batch and loader indices) and what a callback reads in callback_metrics/logged_metrics at
on_train_batch_end, on_train_epoch_end, on_validation_end and on_test_end; the three metric
dictionaries after each stage; metrics.csv's rows; the checkpoint's global_step and epoch; the
learning rate of each step; and the trained weights, bit for bit.

What differs on purpose is written in docs/notes/diff36.md: the checkpoint's keys (trainmesh's own
format; ``IGNORED_KEYS`` lists what each side has that the other has not).
"""

from __future__ import annotations

import pytest

from helpers.differential import Program, differences, run

pytest.importorskip("lightning.pytorch")

# The checkpoint keys one side writes and the other does not (docs/notes/diff36.md says why).
IGNORED_KEYS = (
    "loops",
    "pytorch-lightning_version",
    "epoch_metrics",
    "format",
    "hyper_parameters",
    "loop",
    "per_rank",
    "precision",
    "rng",
    "train_results",
    "trainmesh_version",
    "trainmesh_run",
)
ALL_STAGES = ("fit", "validate", "test", "predict")

MATRIX = {
    "int_limits": (Program(), ALL_STAGES, dict(max_epochs=2, limit_train_batches=3, limit_val_batches=2)),
    "fraction_limits": (
        Program(),
        ("fit", "test"),
        dict(max_epochs=2, limit_train_batches=0.5, limit_val_batches=0.25, limit_test_batches=0.5),
    ),
    "val_check_interval_int": (Program(), ("fit",), dict(max_epochs=1, val_check_interval=3, limit_val_batches=1)),
    "val_check_interval_fraction": (
        Program(),
        ("fit",),
        dict(max_epochs=1, val_check_interval=0.5, limit_val_batches=1),
    ),
    "val_check_interval_zero": (  # Lightning's max(1, int(batches * 0.0)): after every batch
        Program(),
        ("fit",),
        dict(max_epochs=1, limit_train_batches=3, val_check_interval=0.0, limit_val_batches=1),
    ),
    "val_check_every_2_epochs": (
        Program(),
        ("fit",),
        dict(max_epochs=2, val_check_interval=4, check_val_every_n_epoch=2, limit_val_batches=1),
    ),
    "val_check_across_epochs": (
        Program(),
        ("fit",),
        dict(max_epochs=2, val_check_interval=5, check_val_every_n_epoch=None, limit_val_batches=1),
    ),
    "accumulate": (
        Program(),
        ("fit",),
        dict(max_epochs=2, accumulate_grad_batches=3, log_every_n_steps=1, limit_val_batches=1),
    ),
    "manual_two_optimizers": (
        Program(manual=True),
        ("fit",),
        dict(max_epochs=2, log_every_n_steps=2, limit_val_batches=1),
    ),
    "two_eval_loaders": (
        Program(eval_loaders=2),
        ("fit", "validate", "test"),
        dict(max_epochs=1, limit_val_batches=2, limit_test_batches=1, num_sanity_val_steps=0),
    ),
    "stream": (Program(data="stream"), ("fit",), dict(max_epochs=2, limit_val_batches=1, log_every_n_steps=3)),
    "stream_limited": (
        Program(data="stream"),
        ("fit",),
        dict(max_epochs=2, limit_train_batches=3, limit_val_batches=1),
    ),
    "sized_stream": (Program(data="sized_stream"), ("fit",), dict(max_epochs=1, limit_val_batches=1)),
    "max_steps": (Program(), ("fit",), dict(max_steps=5, limit_val_batches=1, log_every_n_steps=2)),
    "early_stopping": (
        Program(early_stopping=True),
        ("fit",),
        dict(max_epochs=4, limit_train_batches=2, limit_val_batches=1),
    ),
    "early_stopping_min_epochs": (
        Program(early_stopping=True),
        ("fit",),
        dict(max_epochs=5, min_epochs=3, limit_train_batches=2, limit_val_batches=1),
    ),
    "early_stopping_min_steps": (
        Program(early_stopping=True),
        ("fit",),
        dict(max_epochs=5, min_steps=5, limit_train_batches=2, limit_val_batches=1),
    ),
    "stop_mid_epoch_min_epochs": (
        Program(stop_at_batch=1),
        ("fit",),
        dict(max_epochs=4, min_epochs=2, limit_train_batches=4, limit_val_batches=1),
    ),
    "stop_mid_epoch_min_steps": (
        Program(stop_at_batch=1),
        ("fit",),
        dict(max_epochs=4, min_steps=6, limit_train_batches=4, limit_val_batches=1),
    ),
    # trainer.rst: should_stop asked in the first epoch, min_steps met inside it: Lightning's
    # min_epochs is then 1 (_parse_loop_limits), so the epoch runs to its end
    "stop_first_epoch_min_steps_met": (
        Program(stop_at_batch=1),
        ("fit",),
        dict(max_epochs=4, min_steps=3, limit_train_batches=4, limit_val_batches=1),
    ),
    "progress_bar": (
        Program(),
        ("fit",),
        dict(max_epochs=1, limit_train_batches=3, log_every_n_steps=1, enable_progress_bar=True),
    ),
    "fast_dev_run": (Program(), ALL_STAGES, dict(fast_dev_run=True)),
    "fast_dev_run_3": (Program(), ("fit", "test"), dict(fast_dev_run=3)),
    "no_sanity_check": (
        Program(),
        ("fit",),
        dict(max_epochs=1, limit_train_batches=2, limit_val_batches=2, num_sanity_val_steps=0),
    ),
    "sanity_check_2": (
        Program(),
        ("fit",),
        dict(max_epochs=1, limit_train_batches=2, limit_val_batches=3, num_sanity_val_steps=2),
    ),
    "epoch_scheduler": (
        Program(scheduler="epoch"),
        ("fit",),
        dict(max_epochs=3, limit_train_batches=2, limit_val_batches=1),
    ),
    "step_scheduler": (
        Program(scheduler="step"),
        ("fit",),
        dict(max_epochs=1, limit_train_batches=3, limit_val_batches=1),
    ),
    "log_in_batch_end": (
        Program(log_in_batch_end=True),
        ("fit",),
        dict(max_epochs=1, limit_train_batches=3, log_every_n_steps=1, limit_val_batches=1),
    ),
    "monitored_checkpoint": (
        Program(checkpoint_monitor="val_loss"),
        ("fit",),
        dict(max_epochs=2, limit_train_batches=2, limit_val_batches=1),
    ),
}


@pytest.mark.parametrize("case", list(MATRIX))
def test_same_program_same_outcome(tmp_path, case):
    program, stages, settings = MATRIX[case]
    theirs = run("lightning", program, tmp_path / "pl", stages, **settings)
    ours = run("trainmesh", program, tmp_path / "tm", stages, **settings)
    # max_steps mid-epoch: trainmesh's checkpoint keeps the epoch it stopped in (docs/notes/diff36.md)
    found = differences(ours, theirs, ignore_checkpoint_keys=IGNORED_KEYS, checkpoint_epoch=case != "max_steps")
    assert found == {}


@pytest.mark.parametrize("max_epochs", [2, 3], ids=["nothing_left", "one_more_epoch"])
def test_resumed_fit_same_outcome(tmp_path, max_epochs):
    """A fit resumed from the checkpoint each framework wrote after 2 epochs: with nothing left to
    train, Lightning calls neither on_train_start nor on_train_end (nor trains or validates)."""
    program, settings = Program(), dict(limit_train_batches=2, limit_val_batches=1)
    outcomes = {}
    for name in ("lightning", "trainmesh"):
        run(name, program, tmp_path / name, max_epochs=2, **settings)
        resumed = tmp_path / name / "resumed"
        ckpt = str(tmp_path / name / "end.ckpt")
        outcomes[name] = run(name, program, resumed, ckpt_path=ckpt, max_epochs=max_epochs, **settings)
    found = differences(outcomes["trainmesh"], outcomes["lightning"], ignore_checkpoint_keys=IGNORED_KEYS)
    assert found == {}


def test_two_trainers_back_to_back_with_clipping(tmp_path):
    """Issue 36's normalizing-flows shape, small: gradient clipping, a ModelCheckpoint monitoring
    val_loss, a shuffling loader, noise drawn in every step (dequantization), an epoch StepLR, fit
    then test, and a second Trainer after the first with the generators as the first left them
    (seeded once). Both Trainers' weights are Lightning's bit for bit."""
    program = Program(random=True, checkpoint_monitor="val_loss", scheduler="epoch")
    settings = dict(max_epochs=3, limit_val_batches=2, gradient_clip_val=0.5)
    outcomes = {}
    for name in ("lightning", "trainmesh"):
        first = run(name, program, tmp_path / name / "a", ("fit", "test"), **settings)
        second = run(name, program, tmp_path / name / "b", ("fit", "test"), seed=False, **settings)
        outcomes[name] = (first, second)
    for ours, theirs in zip(outcomes["trainmesh"], outcomes["lightning"]):
        assert differences(ours, theirs, ignore_checkpoint_keys=IGNORED_KEYS) == {}
