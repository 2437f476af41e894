"""What 1.x's ``trainer.tune`` leaves in the trainer's metrics, against pytorch-lightning 1.9.5 recorded:
``helpers/lightning1_later_programs.py`` was run under 1.9.5 by ``record_lightning_1_9_later_programs.py``."""

import json
import logging
import warnings
from pathlib import Path

import pytest

import trainmesh as tm
from helpers import lightning1_later_programs as programs

RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_later_programs.json").read_text()
)


@pytest.mark.parametrize("search", ["lr_find", "scale_batch_size"])
def test_the_searchs_last_metrics_stay_after_a_1x_tune(search, caplog):
    """callback_metrics and logged_metrics after ``trainer.tune``: the last search fit's ``train_loss``, as
    1.9.5 (its searches are fits; metrics are emptied only when the next run starts). Before: both empty
    (the tuner's reset of the loop state dropped them)."""
    caplog.set_level(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = programs.metrics_after_tune(tm, search=search)
    assert got == RECORDED["measured"][f"metrics_after_{search}"]
