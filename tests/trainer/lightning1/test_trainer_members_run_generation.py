"""What follows a run's Lightning generation (the module's 1.x hooks or the Trainer's 1.x spelling:
``lightning1/trainer_members.py`` ``written_for_lightning1``), not the module's hooks alone: ``trainer.precision``
and ddp's ``find_unused_parameters`` default. Recorded: ``helpers/lightning1_run_generation.py`` run under 1.9.5
by ``record_lightning_1_9_run_generation.py``; Lightning 2.6 runs here."""

import json
import logging
import warnings
from pathlib import Path

import pytest

import trainmesh as tm
from helpers import lightning1_run_generation as programs

RECORDED = json.loads(
    (Path(__file__).resolve().parents[2] / "helpers" / "lightning_1_9_run_generation.json").read_text()
)


def test_a_lightning1_run_answers_1_9_5_s_precision():
    """``trainer.precision`` of a Trainer built by ``from_argparse_args``: 1.9.5's ``"32"``, ``"64"``, ``"bf16"`` for
    every precision it accepts; before: 2.6's ``"32-true"``, ``"64-true"``, ``"bf16-mixed"``."""
    assert programs.precision_answers(tm) == RECORDED["measured"]["precision_answers"]


def test_a_lightning2_run_keeps_lightning_2_6_s_precision():
    """The same Trainers spelled for 2.x: Lightning 2.6's answers."""
    lightning = pytest.importorskip("lightning.pytorch")
    for precision in [None, 16, "64-true"]:  # (each other input: tests/trainer/test_precision_flag.py)
        given = {} if precision is None else {"precision": precision}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = tm.Trainer(accelerator="cpu", devices=1, **programs.QUIET, **given).precision
            theirs = lightning.Trainer(accelerator="cpu", devices=1, **programs.QUIET, **given).precision
        assert ours == theirs, precision


def test_a_lightning1_trainer_spelling_gives_ddp_1_9_5_s_find_unused_parameters(caplog, monkeypatch):
    """A module with no 1.x hook and a head its loss never reads under ``strategy="ddp"`` built by
    ``from_argparse_args``: 1.9.5 sets ``find_unused_parameters=True`` and trains (its weights, and its
    ``trainer.precision`` after fit); before: 2.x's False (only a module with 1.x hooks got True) and DDP's
    unused-parameter error at the second step."""
    caplog.set_level(logging.ERROR)
    # no seed_everything before, as in the recording's process: ddp's setup reseeds with an earlier test's
    # (trainmesh keeps the process's last seed; conftest.py clears only the variables Lightning reads)
    monkeypatch.setattr("trainmesh.seed._settings", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert programs.ddp_unused_head(tm) == RECORDED["measured"]["ddp_unused_head"]


def test_a_lightning1_trainer_spelling_gets_1_9_5_s_missing_checkpoint_words(caplog):
    """``fit(ckpt_path=<missing>)`` under ``from_argparse_args``: 1.9.5's FileNotFoundError words ("Checkpoint at
    ... not found. Aborting training."); before: 2.6's ("Checkpoint file not found: ...", only a module with 1.x
    hooks got 1.9.5's)."""
    caplog.set_level(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert programs.missing_checkpoint(tm) == RECORDED["measured"]["missing_checkpoint"]
