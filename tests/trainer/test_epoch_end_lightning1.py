"""A 1.x module's ``training_epoch_end`` that returns a value (a 0.x-style ``{"log": ...}``) stops the fit at the
first epoch's end with pytorch-lightning 1.9.5's MisconfigurationException, in its words (its fit loop's check).
Before, trainmesh dropped the value: the program trained every epoch with nothing logged, silently (scout-l1
q05). Compared with 1.9.5 itself: ``helpers/lightning1_later_programs.py`` recorded by
``record_lightning_1_9_later_programs.py``."""

import json
import logging
import warnings
from pathlib import Path

import trainmesh as tm
from helpers import lightning1_later_programs as programs

RECORDED = json.loads(
    (Path(__file__).resolve().parent.parent / "helpers" / "lightning_1_9_later_programs.json").read_text()
)


def test_a_training_epoch_end_returning_a_value_stops_as_1_9_5(caplog):
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING):
        warnings.simplefilter("ignore")
        got = programs.training_epoch_end_returning(tm)
    assert got == RECORDED["measured"]["training_epoch_end_returning"]
