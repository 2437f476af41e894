"""Tutorial-style Lightning 2.x programs (campaign of issue 36), each run under Lightning 2.6 and
under trainmesh after the mechanical port (tests/helpers/programs.py), compared as data: metric
dictionaries, metrics.csv rows, files written (checkpoints, hparams.yaml), what the program reads
back, and the trained weights bit for bit. Sizes are tiny: each program is a few steps.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _regression(n: int = 48, features: int = 4, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=g))


def autoencoder_collecting_outputs(L, root):
    """The 2.0 migration guide's autoencoder: validation outputs kept in a list and reduced in
    on_validation_epoch_end; no save_hyperparameters, so no hparams.yaml; then a test-only
    Trainer of a module that saved its hyperparameters (its hparams.yaml comes from test)."""

    class AutoEncoder(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.encoder, self.decoder = nn.Linear(6, 2), nn.Linear(2, 6)
            self.validation_step_outputs, self.summaries = [], []

        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self.decoder(self.encoder(batch[0])), batch[0])
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            self.validation_step_outputs.append(F.mse_loss(self.decoder(self.encoder(batch[0])), batch[0]))

        def on_validation_epoch_end(self):
            average = torch.stack(self.validation_step_outputs).mean()
            self.log("val_average", average)
            self.summaries.append((self.trainer.sanity_checking, len(self.validation_step_outputs), float(average)))
            self.validation_step_outputs.clear()

        def test_step(self, batch, batch_idx):
            self.log("test_loss", F.mse_loss(self.decoder(self.encoder(batch[0])), batch[0]))

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-2)

    class Saved(AutoEncoder):
        def __init__(self, width: int = 2):
            super().__init__()
            self.save_hyperparameters()

    data = TensorDataset(torch.randn(24, 6))
    model = AutoEncoder()
    logger = L.loggers.CSVLogger(root, name="ae")
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=2, logger=logger, enable_checkpointing=False, num_sanity_val_steps=1)
    )
    trainer.fit(model, DataLoader(data, batch_size=8), DataLoader(data, batch_size=12))
    fit = outcome(trainer, model, root, summaries=model.summaries)
    tester = L.pl.Trainer(**trainer_kwargs(root, logger=L.loggers.CSVLogger(root, name="saved")))
    tester.test(Saved(width=3), DataLoader(data, batch_size=12))
    return fit, sorted(str(p.relative_to(root)) for p in root.rglob("hparams.yaml"))


def test_autoencoder_collecting_outputs(tmp_path):
    """Before: trainmesh wrote an empty hparams.yaml for a module that saved no hyperparameters
    (Lightning calls no log_hyperparams then), and none for a run that only tests."""
    found = run_both(autoencoder_collecting_outputs, tmp_path)
    assert found["lightning"][1] == ["saved/version_0/hparams.yaml"]
    assert differences(found["lightning"], found["trainmesh"]) == []


def callback_reading_the_trainer(L, root):
    """The custom-callbacks docs: a Callback keeping a history of what it reads: ``outputs["loss"]``
    at each batch's end (accumulating 2 batches), callback and logged metrics, the epoch,
    the optimizers' learning rates and the scheduler configs (a step warm-up and an epoch cosine)."""
    from helpers.differential import metrics_of

    class History(L.pl.Callback):
        def __init__(self):
            self.history = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.history.append(("batch", batch_idx, trainer.global_step, sorted(outputs), outputs["loss"]))

        def on_train_epoch_end(self, trainer, pl_module):
            lrs = [g["lr"] for o in trainer.optimizers for g in o.param_groups]
            configs = [(c.interval, c.frequency, c.monitor, c.name) for c in trainer.lr_scheduler_configs]
            # progress_bar_metrics too: trainmesh's held a running "loss" in fit, Lightning 2.x's never does
            metrics = [
                metrics_of(m) for m in (trainer.callback_metrics, trainer.logged_metrics, trainer.progress_bar_metrics)
            ]
            self.history.append(("epoch", trainer.current_epoch, pl_module.current_epoch, lrs, configs, metrics))

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self.net(batch[0]), batch[1])
            self.log("loss", loss, prog_bar=True, on_step=True, on_epoch=True)
            return {"loss": loss, "size": len(batch[0])}

        def configure_optimizers(self):
            opt = torch.optim.Adam(self.parameters(), lr=0.05)
            warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 3))
            cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=2)
            return [opt], [{"scheduler": warmup, "interval": "step", "name": "warmup"}, {"scheduler": cosine}]

    history, model = History(), Model()
    logger = L.loggers.CSVLogger(root, name="cb")
    kwargs = trainer_kwargs(root, max_epochs=2, callbacks=[history], logger=logger, log_every_n_steps=1)
    trainer = L.pl.Trainer(accumulate_grad_batches=2, enable_checkpointing=False, **kwargs)
    trainer.fit(model, DataLoader(_regression(24), batch_size=4, shuffle=True))
    return outcome(trainer, model, root, history=history.history)


def test_callback_reading_the_trainer(tmp_path):
    """Before: on_train_batch_end got training_step's own return (a dict holding the loss that still
    requires grad, or a bare tensor) where Lightning gives a dict with the loss detached and
    divided by accumulate_grad_batches (``{}`` for None)."""
    found = run_both(callback_reading_the_trainer, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []


def log_dict_two_val_loaders(L, root):
    """log_dict with on_step/on_epoch/prog_bar/sync_dist, save_hyperparameters and a logger's
    log_hyperparams in on_train_start, two validation loaders naming their own values
    (``add_dataloader_idx=False``) beside a suffixed one, validating twice an epoch, and a value
    rank 0 logs alone (``rank_zero_only=True``)."""

    class Net(L.pl.LightningModule):
        def __init__(self, hidden: int = 3, lr: float = 0.05):
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 1))

        def on_train_start(self):
            self.logger.log_hyperparams({"started": True})

        def training_step(self, batch, batch_idx):
            pred = self.net(batch[0])
            loss, mae = F.mse_loss(pred, batch[1]), F.l1_loss(pred, batch[1])
            self.log_dict(
                {"train/loss": loss, "train/mae": mae}, on_step=True, on_epoch=True, prog_bar=True, sync_dist=True
            )
            return loss

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            loss = F.mse_loss(self.net(batch[0]), batch[1])
            self.log(f"val_loss_{['clean', 'noisy'][dataloader_idx]}", loss, add_dataloader_idx=False, prog_bar=True)
            self.log("val_loss", loss, sync_dist=True)

        def on_validation_epoch_end(self):
            if self.trainer.is_global_zero:
                self.log("val_seen", float(self.global_step), rank_zero_only=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    model = Net(hidden=5)
    logger = L.loggers.CSVLogger(root, name="hp", version="v1")
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=2, logger=logger, log_every_n_steps=2, val_check_interval=0.5),
        enable_checkpointing=False,
    )
    loaders = [DataLoader(_regression(8, seed=s), batch_size=4) for s in (1, 2)]
    trainer.fit(model, DataLoader(_regression(24), batch_size=4), val_dataloaders=loaders)
    fit = outcome(trainer, model, root, hparams=(root / "hp" / "v1" / "hparams.yaml").read_text())
    trainer.validate(model, dataloaders=loaders)
    return fit, outcome(trainer, model, root)


def test_log_dict_two_val_loaders(tmp_path):
    """Before: ``self.log(..., add_dataloader_idx=False)`` (and ``rank_zero_only=True``) was a TypeError."""
    found = run_both(log_dict_two_val_loaders, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []


def test_one_bare_name_from_two_loaders_is_refused(tmp_path):
    """A name two loaders log with add_dataloader_idx=False stops the run, as Lightning 2.6 stops it
    (tests/trainer/test_log_arguments.py compares the two refusals)."""
    import trainmesh as tm

    class Net(tm.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_loss", F.mse_loss(self.layer(batch[0]), batch[1]), add_dataloader_idx=False)

    loaders = [DataLoader(_regression(4, seed=s), batch_size=4) for s in (1, 2)]
    trainer = tm.Trainer(**trainer_kwargs(tmp_path, logger=False))
    from trainmesh.utilities.exceptions import MisconfigurationException

    with pytest.raises(MisconfigurationException, match="add_dataloader_idx=False every evaluation dataloader"):
        trainer.validate(Net(), dataloaders=loaders)
