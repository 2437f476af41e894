"""A name logged on step in ``training_step`` and logged again at the epoch's end: after the epoch,
``trainer.logged_metrics`` holds the epoch-end value (Lightning's epoch-end ``log_metrics`` updates it),
under pytorch-lightning 1.9.5 (``training_epoch_end``, recorded by
``helpers/record_lightning_1_9_ported_programs.py``) and Lightning 2.6 (``on_train_epoch_end``, run here).
Found in a 1.x classifier logging ``train/loss`` from both (l-progs8 p09): trainmesh kept the last
step's value in ``logged_metrics`` (0.668 where both owners had the epoch's mean 0.650)."""

import json
import warnings
from pathlib import Path

import pytest

import trainmesh as tm
from helpers import lightning1_ported_programs as programs

RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_ported_programs.json").read_text()
)


def test_training_epoch_end_s_value_is_the_logged_metric_as_1_9_5():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = programs.name_logged_at_step_and_epoch_end(tm)
    assert got == RECORDED["measured"]["name_logged_at_step_and_epoch_end"]


def test_on_train_epoch_end_s_value_is_the_logged_metric_as_lightning_2_6():
    pl = pytest.importorskip("lightning.pytorch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = programs.name_logged_at_step_and_epoch_end(pl, "on_train_epoch_end")
        got = programs.name_logged_at_step_and_epoch_end(tm, "on_train_epoch_end")
    assert got == expected
    assert got["logged"] == {"seen": 50.0, "train/loss": 101.0}
