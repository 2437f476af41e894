"""``self.log(name, dict)`` from a module written for pytorch-lightning 1.x: one nested metric, against 1.9.5
recorded (``helpers/lightning1_later_programs.py`` run under 1.9.5 by ``record_lightning_1_9_later_programs.py``).
A 2.x module's dict stays refused as Lightning 2.6 refuses it (``trainer/test_log_values.py``)."""

import json
import logging
import warnings
from pathlib import Path

import pytest

import trainmesh as tm
from helpers import lightning1_later_programs as programs

RECORDED = json.loads((Path(__file__).resolve().parent / "helpers" / "lightning_1_9_later_programs.json").read_text())


@pytest.mark.parametrize("where", ["training_step", "training_step_end"])
def test_a_1x_module_s_dict_is_one_nested_metric_as_1_9_5_logs_it(where, caplog):
    """callback_metrics, logged_metrics and the progress bar hold ``training``, ``training_step``,
    ``training_epoch`` and ``val`` as dicts of the keys' values (1.9.5's order), and the csv cells the dict of
    floats. Before: ValueError at the first step (2.x's refusal)."""
    caplog.set_level(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = programs.nested_metric(tm, where=where)
    recorded = RECORDED["measured"][f"nested_metric_in_{where}"]
    assert got == recorded
    assert [list(got[kind]) for kind in ("callback", "logged", "progress_bar")] == [
        list(recorded[kind]) for kind in ("callback", "logged", "progress_bar")
    ]


def test_validate_and_test_return_a_nested_metric_as_1_9_5_and_monitoring_one_fails_as_there(caplog):
    """``trainer.validate`` / ``test`` hand a nested metric out as a dict of tensors; EarlyStopping and
    ModelCheckpoint monitoring one raise 1.9.5's exception types (trainmesh's words say what to monitor)."""
    caplog.set_level(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = programs.nested_metric_results(tm)
    assert got == RECORDED["measured"]["nested_metric_results"]


def test_nest_folds_each_key_back_under_its_name_and_suffix():
    from trainmesh.nested_metrics import nest, nested_name

    flat = {"a": 1, nested_name("t", "x") + "_step": 2, nested_name("t", "y") + "_step": 3, nested_name("v", "x"): 4}
    assert nest(flat) == {"a": 1, "t_step": {"x": 2, "y": 3}, "v": {"x": 4}}
    plain = {"a": 1}
    assert nest(plain) is plain
