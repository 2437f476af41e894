"""``trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress`` (trainer/manual_step_progress.py):
a module stepping an optimizer of its own advances Lightning's step count itself; compared with Lightning 2.6
(helpers/programs.py runs the same program under both)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def own_optimizer_advancing_the_step(L, root, how="increment"):
    """Episodes adapted with a local SGD (no configure_optimizers), the step counted by
    ``optim_step_progress.increment_completed()`` (or ``total.completed += 1``, as PINA's solvers):
    logging cadence and checkpoint names follow it."""

    class Episodic(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.net = nn.Linear(3, 1)
            self.seen = []

        def configure_optimizers(self):
            return None

        def training_step(self, batch, batch_idx):
            opt = torch.optim.SGD(self.net.parameters(), lr=0.1)
            loss = F.mse_loss(self.net(batch[0]), batch[1])
            opt.zero_grad()
            loss.backward()
            opt.step()
            progress = self.trainer.fit_loop.epoch_loop.manual_optimization.optim_step_progress
            if how == "increment":
                progress.increment_ready()
                progress.increment_completed()
            else:
                progress.total.completed += 1
            self.seen.append((self.global_step, progress.total.completed, progress.current.completed))
            self.log("loss", loss)

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(12, 3, generator=g), torch.randn(12, 1, generator=g))
    model = Episodic()
    logger = L.loggers.CSVLogger(root, name="episodes")
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=2, log_every_n_steps=2, logger=logger))
    trainer.fit(model, DataLoader(data, batch_size=3))
    found = outcome(trainer, model, root, seen=model.seen)
    return found


@pytest.mark.parametrize("how", ["increment", "write"])
def test_own_optimizer_steps_counted_as_in_lightning(tmp_path, how):
    """Before: ``AttributeError: 'TrainingEpochLoopView' object has no attribute 'manual_optimization'``."""
    found = run_both(lambda L, root: own_optimizer_advancing_the_step(L, root, how), tmp_path)
    assert found["lightning"]["global_step"] == 8
    assert differences(found["lightning"], found["trainmesh"]) == []
