"""A run is pytorch-lightning 1.x's when its Trainer was built with a spelling only 1.x has, not only when its
module defines a 1.x hook (``lightning1/trainer_members.py`` ``written_for_lightning1``): such a program cannot
run under Lightning 2 (a TypeError), so 1.9.5 is its owner. Recorded: ``helpers/lightning1_more_programs.py``
run under 1.9.5 by ``record_lightning_1_9_more_programs.py``."""

import json
import logging
import warnings
from pathlib import Path

import pytest

import trainmesh as tm
from helpers import lightning1_more_programs as programs

RECORDED = json.loads(
    (Path(__file__).resolve().parents[2] / "helpers" / "lightning_1_9_more_programs.json").read_text()
)


@pytest.mark.parametrize(
    ("spelling", "recorded"), [("gpus", "trainer_gpus_0"), ("argparse", "trainer_from_argparse_args")]
)
def test_a_trainer_spelled_for_1x_runs_as_1_9_5(spelling, recorded, caplog):
    """A module with no 1.x hook under ``Trainer(gpus=0)`` / ``Trainer.from_argparse_args``: 1.9.5's draws (the
    train iterator made after ``on_train_epoch_start``), last.ckpt at the last epoch, LearningRateMonitor's values
    kept out of ``callback_metrics``, metrics.csv's columns in 1.9.5's order, and its weights. Before: Lightning
    2.6's for each (the module alone decided)."""
    caplog.set_level(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert programs.trainer_spelled_for_1x(tm, spelling=spelling) == RECORDED["measured"][recorded]


def test_a_trainer_spelled_for_2x_keeps_lightning_2_6s_behaviour(caplog):
    """The same program with today's spelling, beside Lightning 2.6."""
    lightning = pytest.importorskip("lightning.pytorch")
    caplog.set_level(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = programs.trainer_spelled_for_1x(lightning, spelling="2.x")
        assert expected != RECORDED["measured"]["trainer_gpus_0"]
        assert programs.trainer_spelled_for_1x(tm, spelling="2.x") == expected
