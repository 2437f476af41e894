"""Where a stage's data iterator is made (trainer/iterator_timing.py), seen as torch's generator in each hook: a
1.x module's against pytorch-lightning 1.9.5 recorded (``helpers/lightning1_hook_rng.py`` run under 1.9.5 by
``record_lightning_1_9_hook_rng.py``), a 2.x module's against installed Lightning beside it."""

import json
import logging
import warnings
from pathlib import Path

import lightning.pytorch as lightning
import pytest

import trainmesh as tm
from helpers import lightning1_hook_rng as probe

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_hook_rng.json").read_text())


def _draws(pl, variant: str, *, lightning1: bool) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return probe.hook_draws(pl, **probe.VARIANTS[variant], lightning1=lightning1)


@pytest.mark.parametrize(
    "variant",
    [
        "workers=0,sanity=True,val_loaders=2",
        "workers=1,sanity=False,val_loaders=1",
        "workers=0,sanity=False,val_loaders=1,reload",
    ],
)
def test_a_1x_modules_hooks_see_the_generator_as_1_9_5(variant, caplog):
    """1.9.5 makes each iterator after the epoch-start hook: on_train_start / on_train_epoch_start, on_validation_start
    / _epoch_start (sanity check included), on_test_* and on_predict_* see the generator before the loader's draws (a
    VAE built in on_validation_start gets 1.9.5's weights, l-progs15 p03). Before: every one of them after (2.x's
    order). With ``reload_dataloaders_every_n_epochs=1``, 1.9.5 starts no extra iterator at the reload (before: one
    more, so the second epoch's shuffle and every draw after it differed)."""
    caplog.set_level(logging.ERROR)
    assert _draws(tm, variant, lightning1=True) == RECORDED["measured"][variant]


@pytest.mark.parametrize(
    "variant", ["workers=0,sanity=True,val_loaders=2", "workers=0,sanity=False,val_loaders=1,reload"]
)
def test_a_2x_modules_hooks_see_the_generator_as_lightning_2(variant, caplog):
    """A module without 1.x hooks keeps 2.x's order: the iterator made before the stage's start hook, and one more
    at a reload."""
    caplog.set_level(logging.ERROR)
    assert _draws(tm, variant, lightning1=False) == _draws(lightning, variant, lightning1=False)
