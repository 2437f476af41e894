"""``trainer.fit_loop.setup_data()`` in configure_optimizers, a fresh run's counters "reset" to what they hold
in on_train_start, and ``epoch_loop.automatic_optimization.optim_progress`` read (trainer/loop_views.py), as a
diffusion program (BrownianBridgeModel) uses them; compared with Lightning 2.6 (helpers/programs.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def loops_set_up_and_reset(L, root, manual):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = not manual
            self.net = nn.Linear(3, 1)
            self.seen = []

        def configure_optimizers(self):
            self.trainer.fit_loop.setup_data()
            self.seen.append(("batches", len(self.trainer.train_dataloader)))
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_train_start(self):
            fit = self.trainer.fit_loop
            fit.epoch_progress.current.processed = 0  # the values a fresh run holds: Lightning changes nothing
            fit.epoch_progress.current.completed = 0
            fit.epoch_loop.manual_optimization.optim_step_progress.total.completed = 0
            fit.epoch_loop.automatic_optimization.optim_progress.optimizer.step.total.completed = 0

        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self.net(batch[0]), batch[1])
            if manual:
                opt = self.optimizers()
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()
            return loss

        def on_train_batch_end(self, outputs, batch, batch_idx):
            progress = self.trainer.fit_loop.epoch_loop.automatic_optimization.optim_progress
            step = progress.optimizer.step
            self.seen.append((progress.optimizer_steps, step.total.completed, step.current.completed))

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(10, 3, generator=g), torch.randn(10, 1, generator=g))
    model = Model()
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=2, logger=False, enable_checkpointing=False))
    trainer.fit(model, DataLoader(data, batch_size=4))
    return outcome(trainer, model, root, seen=model.seen)


@pytest.mark.parametrize("manual", [False, True])
def test_setup_data_and_counters_as_in_lightning(tmp_path, manual):
    """Before: ``AttributeError: 'FitLoopView' object has no attribute 'setup_data'``; then the writes of the
    values held refused; then no ``automatic_optimization``."""
    found = run_both(lambda L, root: loops_set_up_and_reset(L, root, manual), tmp_path)
    assert found["lightning"]["extra"]["seen"][0] == ("batches", 3)
    assert differences(found["lightning"], found["trainmesh"]) == []
