"""1.x's ``trainer.tune`` batch-size search on a loader whose dataset ``setup`` makes, against pytorch-lightning
1.9.5 recorded: ``helpers/lightning1_more_programs.py`` run under 1.9.5 by ``record_lightning_1_9_more_programs.py``."""

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


@pytest.mark.parametrize("owner", ["module", "datamodule"])
def test_the_search_measures_the_loader_after_setup(owner, caplog):
    """The size found, the fit that follows and its weights, as 1.9.5's (its search runs inside a fit, after the
    setup hooks). Before: AttributeError (the search asked for the train loader before ``setup`` had run)."""
    caplog.set_level(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = programs.batch_size_search_on_a_set_up_dataset(tm, owner=owner)
    assert got == RECORDED["measured"][f"batch_size_search_{owner}_setup"]
