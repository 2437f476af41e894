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
    ("spelling", "recorded"),
    [("gpus", "trainer_gpus_0"), ("argparse", "trainer_from_argparse_args"), ("plugin", "trainer_gpus_0")],
)
def test_a_trainer_spelled_for_1x_runs_as_1_9_5(spelling, recorded, caplog):
    """A module with no 1.x hook under ``Trainer(gpus=0)`` / ``Trainer.from_argparse_args``: 1.9.5's draws (the
    train iterator made after ``on_train_epoch_start``), last.ckpt at the last epoch, LearningRateMonitor's values
    kept out of ``callback_metrics``, metrics.csv's columns in 1.9.5's order, and its weights. Before: Lightning
    2.6's for each (the module alone decided). ``plugins=SingleDevicePlugin(...)`` (a 1.x plugin name, which
    1.8 removed) runs the program as ``gpus=0`` does under 1.9.5; before: 2.6's (only a 1.x argument counted)."""
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


# Each 1.x-only spelling of plugins or strategy, as Trainer(**arguments)
LIGHTNING1_PLUGINS = {
    "plugins=DDPPlugin()": lambda plugins: {"plugins": plugins.DDPPlugin()},
    "plugins=[DDPSpawnPlugin()]": lambda plugins: {"plugins": [plugins.DDPSpawnPlugin()]},
    "strategy=DDPPlugin()": lambda plugins: {"strategy": plugins.DDPPlugin()},
    "plugins='ddp_sharded'": lambda plugins: {"plugins": "ddp_sharded"},
    "plugins=DDPStrategy()": lambda plugins: {"plugins": tm.strategies.DDPStrategy()},
    "plugins=NativeMixedPrecisionPlugin": lambda plugins: {
        "plugins": plugins.NativeMixedPrecisionPlugin("bf16", "cpu")
    },
}


@pytest.mark.parametrize("spelling", LIGHTNING1_PLUGINS)
def test_a_lightning1_plugin_spelling_makes_the_run_1x(spelling):
    """A strategy in ``plugins`` (what Lightning up to 1.7 took there) or an object a 1.x plugin name made makes
    the run 1.x's, as the other 1.x-only spellings do; before: only the module's hooks and 1.x arguments counted."""
    from trainmesh import plugins

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        given = LIGHTNING1_PLUGINS[spelling](plugins)
        trainer = tm.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, **given)
    assert trainer._written_for_lightning1


def test_today_s_plugins_leave_the_run_2x():
    from trainmesh.plugins import MixedPrecision

    trainer = tm.Trainer(
        accelerator="cpu", devices=1, strategy="ddp", plugins=[MixedPrecision("bf16-mixed", "cpu")], logger=False
    )
    assert not trainer._written_for_lightning1
