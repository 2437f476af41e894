"""pytorch-lightning 1.x's ``OptimizerLoop`` as yielding_training_step.py uses it: a subclass connected with
``trainer.fit_loop.epoch_loop.batch_loop.connect(optimizer_loop=...)`` that gets the ``training_step`` generator
through ``trainer.strategy.training_step`` once per batch and hands each optimizer's closure its next loss
(``ClosureResult``), against pytorch-lightning 1.9.5's run of the same program (recorded by
``tests/helpers/record_lightning_1_9_examples.py``), and what it refuses before training."""

import json
from pathlib import Path

import pytest
import torch

import trainmesh as tm
from helpers import lightning1_examples as programs

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "helpers" / "lightning_1_9_examples.json").read_text())


def test_a_connected_yielding_loop_trains_as_lightning_1_9():
    """Two optimizers (SGD, Adam), 4 batches, 2 epochs: each turn's loss, the logged g_loss / d_loss,
    global_step 16 and the weights bit-identical to 1.9.5's (before: no trainmesh.loops, then refused)."""
    got = json.loads(json.dumps(programs.yielding_optimizer_loop()))
    assert got == RECORDED["yielding_optimizer_loop"]
    assert got["global_step"] == 16


def test_a_connected_loop_is_refused_where_it_cannot_run():
    """Under dp (a strategy without Lightning's ``strategy.training_step``, which the loop calls itself) and
    with gradient accumulation (its ``ClosureResult`` divides the loss as trainmesh's step does again): refused
    before training, the weights untouched; and ``connect`` takes only an ``OptimizerLoop`` subclass."""
    loop_class = programs._yielding_loop()
    quiet = {"max_epochs": 1, "enable_checkpointing": False, **programs.QUIET}
    for settings, reason in (
        ({"strategy": "dp", "accelerator": "cpu", "devices": 1}, "not under 'dp'"),
        ({"accumulate_grad_batches": 2}, "accumulate_grad_batches=1"),
    ):
        trainer = tm.Trainer(**settings, **quiet)
        trainer.fit_loop.epoch_loop.batch_loop.connect(optimizer_loop=loop_class())
        model = programs.Adversaries()
        before = [p.detach().clone() for p in model.parameters()]
        with pytest.raises(ValueError, match=reason):
            trainer.fit(model)
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(TypeError, match="OptimizerLoop"):
        trainer.fit_loop.epoch_loop.batch_loop.connect(optimizer_loop=object())
