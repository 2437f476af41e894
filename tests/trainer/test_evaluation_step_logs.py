"""Values a validation or test step logs with ``on_step=True`` reach the loggers after each batch, as
Lightning 2.6 sends them (found running Lightning's autoencoder example, whose TensorBoard files
held ``val_loss_step`` and ``test_loss_step`` curves that trainmesh's lacked): one row per batch
under ``<name>_step`` (and the loader's suffix where there are several), at the count of
evaluation batches that loop has run (the fit's validation counts on across its runs; each
``validate``/``test`` call starts from 0), never in the sanity check. Compared as metrics.csv rows
and ``logged_metrics`` with Lightning's run of the same program."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _loader(seed: int, n: int = 12) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)


def step_logging_program(L, root):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def _loss(self, batch):
            x, y = batch
            return F.mse_loss(self.layer(x), y)

        def training_step(self, batch, batch_idx):
            loss = self._loss(batch)
            self.log("train_loss", loss, on_step=True)
            return loss

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_loss", self._loss(batch), on_step=True)
            self.log("val_plain", self._loss(batch))  # on_epoch only: no step rows

        def test_step(self, batch, batch_idx):
            self.log("test_loss", self._loss(batch), on_step=True, prog_bar=True)
            self.log("test_hidden", self._loss(batch), on_step=True, logger=False)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Model()
    settings = dict(max_epochs=2, limit_val_batches=2, log_every_n_steps=1, num_sanity_val_steps=1)
    logger = L.loggers.CSVLogger(root)
    trainer = L.pl.Trainer(**trainer_kwargs(root, logger=logger, enable_checkpointing=False, **settings))
    trainer.fit(model, _loader(0), _loader(1))
    fitted = outcome(trainer, model, root)
    trainer.validate(model, [_loader(1), _loader(2, 8)])
    validated = outcome(trainer, model, root)
    trainer.test(model, _loader(3))
    return fitted, validated, outcome(trainer, model, root)


def test_evaluation_step_values_reach_the_loggers_as_lightnings(tmp_path):
    found = run_both(step_logging_program, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    rows = next(iter(found["trainmesh"][2]["csv"].values()))
    assert [r["step"] for r in rows if "test_loss_step" in r] == ["0", "1", "2"]
