"""What lightning-bolts' models and callbacks showed (campaign of issue 36, branch c-bolts), each as a
small program of our own run under Lightning 2.6 and under its port (tests/helpers/programs.py),
compared as data: weights bit for bit, the metric dictionaries, what the hooks read.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _loader(n: int, batch_size: int, seed: int = 0) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=batch_size)


def gradients_made_outside_the_step(L, root):
    """A callback runs a backward through the module in on_train_start (bolts'
    BatchGradientVerificationCallback does), another reads the gradients in on_train_batch_end;
    Adam, no zero_grad hook of the module's own. Lightning zeroes at the window's first batch before
    backward and keeps the gradients after the step."""
    seen = []

    class Verify(L.pl.Callback):
        def on_train_start(self, trainer, pl_module):
            pl_module.zero_grad()
            pl_module(torch.ones(2, 4)).sum().backward()

    class Read(L.pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            grad = pl_module.net.weight.grad
            seen.append(None if grad is None else grad.clone())

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            return nn.functional.mse_loss(self(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.05)

    model = Model()
    kwargs = trainer_kwargs(root, max_epochs=2, accumulate_grad_batches=2, logger=False, enable_checkpointing=False)
    trainer = L.pl.Trainer(callbacks=[Verify(), Read()], **kwargs)
    trainer.fit(model, _loader(12, 2))
    after = model.net.weight.grad
    return outcome(trainer, model, root, seen=seen, after=None if after is None else after.clone())


def test_gradients_made_outside_the_step_are_zeroed_and_kept_as_lightning(tmp_path):
    found = run_both(gradients_made_outside_the_step, tmp_path)
    assert len(found["lightning"]["extra"]["seen"]) == 12
    assert differences(found["lightning"], found["trainmesh"]) == []


def epoch_end_logging_a_step_name(L, root):
    """Lightning 1.x's ``validation_epoch_end(outputs)`` logging the name its steps logged with
    on_step=True (bolts' LogisticRegression logs ``val_loss`` in both), validation batches of 16 and
    14. trainmesh runs the 1.x program; Lightning 2.6 runs its 2.0 migration (the outputs kept by the
    module, logged in ``on_validation_epoch_end``), which 1.9.5 matches: the steps' batch-weighted
    ``val_loss_epoch`` and the epoch-end hook's own ``val_loss``."""
    one_x = L.pl.__name__ == "trainmesh"

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)
            self.kept = []

        def training_step(self, batch, batch_idx):
            return nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
            self.log_dict({"val_loss": loss}, on_step=True)
            self.kept.append({"val_loss": loss})
            return {"val_loss": loss}

        def _epoch_end(self, outputs):
            self.log_dict({"val_loss": torch.stack([o["val_loss"] for o in outputs]).mean()}, on_epoch=True)

        if one_x:

            def validation_epoch_end(self, outputs):
                self._epoch_end(outputs)

        else:

            def on_validation_epoch_end(self):
                self._epoch_end(self.kept)

        def on_validation_epoch_start(self):
            self.kept = []

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    model = Model()
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=2, logger=L.loggers.CSVLogger(root), log_every_n_steps=1))
    trainer.fit(model, _loader(8, 4), _loader(30, 16, seed=1))
    found = outcome(trainer, model, root)
    return found


def test_a_1_x_epoch_end_logging_a_step_name_keeps_the_two_apart(tmp_path):
    found = run_both(epoch_end_logging_a_step_name, tmp_path)
    assert set(found["lightning"]["logged_metrics"]) == {"val_loss", "val_loss_epoch", "val_loss_step"}
    # trainmesh runs the 1.x spelling (validation_epoch_end) as a 1.x run, whose CSVLogger writes
    # hparams.yaml at each save as 1.9.5's does (tests/trainer/lightning1/test_accumulation.py checks
    # that against the 1.9.5 recording); Lightning 2.6 runs the 2.x spelling and writes none
    ours = found["trainmesh"]
    hparams = "lightning_logs/version_0/hparams.yaml"
    assert hparams in ours["files"]
    ours = {**ours, "files": [f for f in ours["files"] if f != hparams]}
    assert differences(found["lightning"], ours) == []


@pytest.mark.parametrize("strategy", ["auto", "ddp", "ddp_spawn", "dp"])
def test_the_accelerator_connector_says_distributed_as_lightning_s(strategy):
    """lightning-bolts' ``SSLOnlineEvaluator`` reads ``trainer._accelerator_connector.is_distributed``
    in ``on_fit_start`` to wrap its own head in DDP; trainmesh's Trainer had no such member (the
    callback stopped with an AttributeError). Lightning 2.6 has no ``dp``: trainmesh's answers False
    there, as a one-process strategy."""
    import lightning.pytorch as pl

    import trainmesh as tm

    settings = dict(strategy=strategy, devices=1, accelerator="cpu", logger=False, enable_progress_bar=False)
    ours = tm.Trainer(**settings)._accelerator_connector
    if strategy == "dp":
        assert ours.is_distributed is False
        return
    theirs = pl.Trainer(**settings)._accelerator_connector
    assert ours.is_distributed == theirs.is_distributed
