"""``trainer.fit_loop.epoch_loop._batches_that_stepped = n``, as Lightning 2.6 takes it: a plain attribute a program
may set before fit (RAVE's and SonyCSL's training scripts, before ``fit(ckpt_path=run)``), in the module's
``on_load_checkpoint`` (Fengshen's modules) or in a callback: the loggers' next steps count on from it, and a
resume's checkpoint overwrites what was set before its loops are restored. Before: refused as read-only."""

import logging
import os
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm


def logged_steps(pl, root: str) -> dict:
    """The steps each fit's logger is given, with the values set before fit, in a callback mid-fit, before a
    resume and in ``on_load_checkpoint``, and after fit before ``validate``."""

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val", self.layer(batch[0]).mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Loading(Model):
        def on_load_checkpoint(self, checkpoint):
            self.trainer.fit_loop.epoch_loop._batches_that_stepped = 7000

    class Rows(pl.loggers.Logger):
        name, version = "rows", 0

        def __init__(self):
            super().__init__()
            self.steps = []

        def log_metrics(self, metrics, step=None):
            self.steps.append(step)

        def log_hyperparams(self, *args, **kwargs):
            pass

    class MidFit(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 2:
                trainer.fit_loop.epoch_loop._batches_that_stepped = 30

    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(16, 3)), batch_size=4)
    options = dict(
        accelerator="cpu", devices=1, log_every_n_steps=1, enable_progress_bar=False, enable_model_summary=False
    )
    first = pl.Trainer(max_steps=4, logger=Rows(), callbacks=[MidFit()], limit_val_batches=0, **options)
    first.fit_loop.epoch_loop._batches_that_stepped = 100
    first.fit(Model(), loader)
    checkpoint = os.path.join(root, "four.ckpt")
    first.save_checkpoint(checkpoint)
    resumed = pl.Trainer(max_steps=6, logger=Rows(), default_root_dir=root, **options)
    resumed.fit_loop.epoch_loop._batches_that_stepped = 4000
    resumed.fit(Loading(), loader, ckpt_path=checkpoint)
    after_fit = resumed.fit_loop.epoch_loop._batches_that_stepped
    resumed.fit_loop.epoch_loop._batches_that_stepped = 50
    resumed.validate(Model(), loader, verbose=False)
    return {"first": first.logger.steps, "resumed": resumed.logger.steps, "after_fit": after_fit}


def test_batches_that_stepped_written_as_in_lightning(tmp_path, caplog):
    lightning = pytest.importorskip("lightning.pytorch")
    caplog.set_level(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = logged_steps(lightning, str(tmp_path / "lightning"))
        ours = logged_steps(tm, str(tmp_path / "trainmesh"))
    # 100 set before fit, 30 by the callback; the checkpoint's 33 over 4000 and 7000; 50 for validate
    assert theirs == {"first": [100, 30, 31, 32], "resumed": [33, 34, 50], "after_fit": 35}
    assert ours == theirs
