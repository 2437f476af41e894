"""Lightning 2.x programs of the l-progs20 campaign (docs/how-to/lightning-measured.md), reduced to what
differed: each runs under Lightning 2.6 and under its port (tests/helpers/programs.py), compared as data."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _relative(path, root):
    return os.path.relpath(path, root) if path else path


def evaluated_from_a_model_that_configures_its_checkpoint(L, root):
    """A module whose configure_callbacks returns its ModelCheckpoint, fitted, then tested and validated
    with ckpt_path="best" and "last" (a published pattern: Lightning's configure_callbacks docs). Lightning
    turns "best"/"last" into the fit's files before the model's callbacks are attached again for the run."""

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def configure_callbacks(self):
            return [L.pl.callbacks.ModelCheckpoint(monitor="val_loss", save_last=True)]

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.mse_loss(self.layer(batch[0]), batch[1]) + 10 * (self.current_epoch == 0))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 4, generator=g)
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    model = Model()
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=3, enable_model_summary=False, logger=False))
    trainer.fit(model, data, data)
    best = trainer.test(model, data, ckpt_path="best")
    best_path = _relative(trainer.ckpt_path, root)
    last = trainer.validate(model, data, ckpt_path="last")
    last_path = _relative(trainer.ckpt_path, root)
    return outcome(trainer, model, root, best=best, best_path=best_path, last=last, last_path=last_path)


def test_best_and_last_are_the_fit_s_files_where_the_model_configures_its_checkpoint(tmp_path):
    """Found by a configure_callbacks program: trainmesh attached the model's fresh ModelCheckpoint before
    reading "best", so test(ckpt_path="best") stopped ("not configured to save the best model") where
    Lightning 2.6.6 tests the fit's best file."""
    found = run_both(evaluated_from_a_model_that_configures_its_checkpoint, tmp_path)
    assert found["lightning"]["extra"]["best_path"].endswith("epoch=2-step=6.ckpt")
    assert differences(found["lightning"], found["trainmesh"]) == []
