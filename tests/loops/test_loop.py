"""pytorch-lightning 1.x's loop API (``trainmesh.loops``): the ``Loop`` base class of a loop of one's own, run as
1.9.5 runs it (the program of ``tests/helpers/lightning1_examples.py``, recorded under 1.9.5 by
``record_lightning_1_9_examples.py``), and the Trainer's 1.x loops, which the published examples kfold.py and
yielding_training_step.py rewire, refused with what to do instead (before: ImportError / AttributeError)."""

import json
from pathlib import Path

import pytest

import trainmesh as tm
from helpers import lightning1_examples as programs
from trainmesh.utilities.refusal import RefusedError

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_examples.json").read_text())


def test_a_loop_of_one_s_own_runs_as_lightning_1_9():
    """An outer loop over 3 folds with a connected inner loop: the hooks' order, a ``StopIteration`` ending
    the second inner run after 2 steps (runs return [3, 2, 3]), ``replace(inner=Inner)`` after each fold, the
    Trainer handed to the sub-loop, ``state_dict`` ({"state_dict": {"fold": 3}, "inner.state_dict": ...}),
    ``load_state_dict`` (``on_load_checkpoint``, ``restarting``) as 1.9.5's."""
    assert json.loads(json.dumps(programs.custom_loop_run())) == RECORDED["custom_loop_run"]


def test_the_trainer_s_1x_loops_refuse_with_what_to_do():
    """kfold.py's ``trainer.fit_loop = KFoldLoop(...)`` and its ``replace`` / ``test_loop.run()``, 1.x's
    ``FitLoop`` and ``ManualOptimization``, a ``manual_loop`` connected to the batch loop: each stops with the
    same reason, naming what trainmesh has (the Loop base class, a connected OptimizerLoop) and the 2.x ways (a
    fit per fold, manual optimization); the imports the examples make succeed (kfold.py's ``core.module`` too)."""
    from trainmesh.core.datamodule import LightningDataModule
    from trainmesh.core.module import LightningModule
    from trainmesh.loops import FitLoop, Loop, ManualOptimization
    from trainmesh.loops.fit_loop import FitLoop as fit_loop_module_s

    assert (LightningModule, LightningDataModule) == (tm.LightningModule, tm.LightningDataModule)  # kfold.py's paths

    class KFoldLoop(Loop):
        done, reset, advance = True, None, None

    trainer = tm.Trainer(logger=False, enable_checkpointing=False)
    attempts = {
        "FitLoop()": fit_loop_module_s,
        "ManualOptimization()": ManualOptimization,
        "trainer.fit_loop = KFoldLoop()": lambda: setattr(trainer, "fit_loop", KFoldLoop()),
        "batch_loop.connect(manual_loop)": lambda: trainer.fit_loop.epoch_loop.batch_loop.connect(manual_loop=1),
        "fit_loop.replace": lambda: trainer.fit_loop.replace(fit_loop=FitLoop),
        "test_loop.run": lambda: trainer.test_loop.run(),
    }
    for what, attempt in attempts.items():
        with pytest.raises(RefusedError) as refused:
            attempt()
        message = str(refused.value)
        assert "trainmesh.loops.Loop" in message and "connect(optimizer_loop=...)" in message, what
        assert "a new Trainer and the fold's DataModule" in message and "manual optimization" in message, what
