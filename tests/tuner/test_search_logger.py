"""The run's logger while the tuner searches: Lightning 2.6 and pytorch-lightning 1.9.5 put a ``DummyLogger`` in
its place (None stays None) for the search's trials, so a hook's ``self.logger.experiment...`` runs and writes
nothing; the run's logger is back for the checkpoint restore and after. Lightning 2.6 runs beside trainmesh
here; 1.9.5's runs were recorded by ``helpers/record_lightning_1_9_search_logger.py`` (``helpers/search_logger.py``)."""

import json
import logging
import warnings
from pathlib import Path

import pytest

import trainmesh as tm
from helpers.search_logger import search_logger

RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_search_logger.json").read_text()
)["measured"]
TRIAL_HOOKS = {"on_train_start", "training_step", "on_train_end", "tuned"}


def _quietly(pl, search, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return search_logger(pl, search, **kwargs)


@pytest.mark.parametrize(("search", "with_logger"), [("lr_find", True), ("scale_batch_size", True), ("lr_find", False)])
def test_the_tuners_trials_see_lightnings_dummy_logger(search, with_logger, caplog):
    """Tuner.lr_find / scale_batch_size (the finder callbacks' searches): every hook sees what it sees in
    Lightning 2.6. Before: the trials' hooks saw the run's CSVLogger, its experiment real."""
    import lightning.pytorch as lightning

    caplog.set_level(logging.ERROR)
    assert _quietly(tm, search, with_logger=with_logger) == _quietly(lightning, search, with_logger=with_logger)


@pytest.mark.parametrize("search", ["lr_find", "auto_lr_find", "auto_scale_batch_size", "auto_lr_find_no_logger"])
def test_1x_searches_see_1_9_5s_dummy_logger(search, caplog):
    """1.x's ``trainer.tuner.lr_find`` and ``trainer.tune``: the trials' hooks see 1.9.5's ``DummyLogger`` (None
    without a logger). Before: no logger, so a 1.x hook's ``self.logger.experiment`` crashed in ``trainer.tune``.
    ``trainer.tune``'s trials are fits of their own here (``_in_one_fit = False``): their other hooks differ
    from 1.9.5's, so only the trials' hooks are compared there."""
    caplog.set_level(logging.ERROR)
    name = search.removesuffix("_no_logger")
    got, recorded = _quietly(tm, name, with_logger=search == name), dict(RECORDED[search])
    if name.startswith("auto_"):
        got["seen"] = [row for row in got["seen"] if row[0] in TRIAL_HOOKS]
        recorded["seen"] = [row for row in recorded["seen"] if row[0] in TRIAL_HOOKS]
    assert got == recorded
