"""When ``last.ckpt`` is written: Lightning 2.6's rule for a 2.x module, pytorch-lightning 1.9.5's for a module with
a 1.x hook (recorded: ``helpers/lightning1_more_programs.py`` run under 1.9.5 by
``record_lightning_1_9_more_programs.py``)."""

import json
import logging
import warnings
from pathlib import Path

import pytest

import trainmesh as tm
from helpers import lightning1_more_programs as programs

RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_more_programs.json").read_text()
)


def _run(framework, *, lightning1_hook: bool) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return programs.last_checkpoint_after_no_improvement(framework, lightning1_hook=lightning1_hook)


def test_a_1x_module_writes_last_ckpt_at_every_epoch_end(caplog):
    """A module with ``training_step_end``: last.ckpt holds the final epoch (global step 8), as 1.9.5's, though the
    monitored value stopped improving after epoch 1. Before: Lightning 2.6's rule left last.ckpt at epoch 1 (step 4),
    so a 1.x program resuming from it went back two epochs."""
    caplog.set_level(logging.ERROR)
    assert _run(tm, lightning1_hook=True) == RECORDED["measured"]["last_checkpoint_lightning1_module"]


def test_a_2x_module_keeps_lightning_2_6s_rule(caplog):
    """The same module without a 1.x hook, beside Lightning 2.6: last.ckpt only where a top-k file was written."""
    lightning = pytest.importorskip("lightning.pytorch")
    caplog.set_level(logging.ERROR)
    expected = _run(lightning, lightning1_hook=False)
    assert expected["last_global_step"] == 4
    assert _run(tm, lightning1_hook=False) == expected
