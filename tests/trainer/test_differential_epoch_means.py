"""Epoch means of ``self.log`` values under Lightning 2.6 and under trainmesh, to the last bit.

Lightning's ``_ResultMetric`` adds ``value * batch_size`` into a float32 sum (a float64 value
promotes it to float64; a number becomes a float32 tensor as it is logged; float16 is cast to
float32) and divides by the integer count of samples. trainmesh summed in float64 before, which
gave a different last bit (and the loggers the float64 mean). One program logs a float32 loss, a
number, a float64 tensor, a float16 tensor and a ``reduce_fx="sum"`` value, per epoch in
training and in evaluation over uneven batches (61 samples at batch 7): ``callback_metrics``
(repr and dtype), what ``trainer.test`` returns and metrics.csv's rows are Lightning's. The same
under ddp with and without ``sync_dist``: tests/trainer/test_evaluation_shares.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def epoch_means(L, root):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2)

        def _log_all(self, stage, batch):
            loss = nn.functional.cross_entropy(self.net(batch[0]), batch[1])
            self.log(f"{stage}_loss", loss, on_epoch=True)
            self.log(f"{stage}_number", loss.item() / 3, on_epoch=True)
            self.log(f"{stage}_wide", loss.double() / 7, on_epoch=True)
            self.log(f"{stage}_half", loss.half(), on_epoch=True)
            self.log(f"{stage}_total", loss, on_epoch=True, reduce_fx="sum")
            return loss

        def training_step(self, batch, batch_idx):
            return self._log_all("train", batch)

        def validation_step(self, batch, batch_idx):
            self._log_all("val", batch)

        def test_step(self, batch, batch_idx):
            self._log_all("test", batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(3)
    x = torch.randn(61, 4, generator=g)
    loader = DataLoader(TensorDataset(x, (x.sum(1) > 0).long()), batch_size=7)
    model = Model()
    logger = L.loggers.CSVLogger(root, name="means")
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, logger=logger, enable_checkpointing=False, max_epochs=2, enable_model_summary=False)
    )
    trainer.fit(model, loader, loader)
    after_fit = {k: (repr(v.item()), str(v.dtype)) for k, v in trainer.callback_metrics.items()}
    returned = trainer.test(model, loader, verbose=False)
    exact = {k: (repr(v.item()), str(v.dtype)) for k, v in trainer.callback_metrics.items()}
    return outcome(trainer, model, root, returned=repr(returned), exact=exact, after_fit=after_fit)


def test_epoch_means_are_lightning_s_to_the_bit(tmp_path):
    found = run_both(epoch_means, tmp_path)
    theirs, ours = found["lightning"], found["trainmesh"]
    assert differences(theirs, ours) == []
    # to the bit: differences() compares floats (and strings of floats) to a relative 1e-6
    assert ours["extra"] == theirs["extra"]
    assert ours["csv"] == theirs["csv"]
