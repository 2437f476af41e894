"""More tutorial-style programs of the issue-36 campaign under Lightning 2.6 and their port
(tests/helpers/programs.py): each ran bit-identical when measured; kept so that it stays so."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def gan_manual_optimization(L, root):
    """The basic GAN tutorial: manual optimization, two Adams, toggle/untoggle_optimizer."""

    class GAN(L.pl.LightningModule):
        def __init__(self, latent: int = 2):
            super().__init__()
            self.save_hyperparameters()
            self.automatic_optimization = False
            self.generator = nn.Sequential(nn.Linear(latent, 8), nn.LeakyReLU(0.2), nn.Linear(8, 2))
            self.discriminator = nn.Sequential(nn.Linear(2, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1), nn.Sigmoid())

        def training_step(self, batch):
            real = batch[0]
            opt_g, opt_d = self.optimizers()
            z = torch.randn(real.shape[0], self.hparams.latent).type_as(real)
            ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)
            self.toggle_optimizer(opt_g)
            g_loss = F.binary_cross_entropy(self.discriminator(self.generator(z)), ones)
            self.log("g_loss", g_loss, prog_bar=True)
            self.manual_backward(g_loss)
            opt_g.step()
            opt_g.zero_grad()
            self.untoggle_optimizer(opt_g)
            self.toggle_optimizer(opt_d)
            fake = self.discriminator(self.generator(z).detach())
            d_loss = (F.binary_cross_entropy(self.discriminator(real), ones) + F.binary_cross_entropy(fake, zeros)) / 2
            self.log("d_loss", d_loss, prog_bar=True)
            self.manual_backward(d_loss)
            opt_d.step()
            opt_d.zero_grad()
            self.untoggle_optimizer(opt_d)

        def configure_optimizers(self):
            adam = dict(lr=2e-3, betas=(0.5, 0.999))
            return [
                torch.optim.Adam(self.generator.parameters(), **adam),
                torch.optim.Adam(self.discriminator.parameters(), **adam),
            ], []

    data = torch.cat([torch.randn(16, 2) + 2, torch.randn(16, 2) - 2])
    model = GAN()
    logger = L.loggers.CSVLogger(root, name="gan")
    kwargs = trainer_kwargs(root, max_epochs=2, logger=logger, log_every_n_steps=2, enable_checkpointing=False)
    trainer = L.pl.Trainer(**kwargs)
    trainer.fit(model, DataLoader(TensorDataset(data), batch_size=8, shuffle=True))
    return outcome(trainer, model, root, requires_grad=[p.requires_grad for p in model.parameters()])


def plateau_checkpoint_best(L, root):
    """ReduceLROnPlateau on val_loss, EarlyStopping, ModelCheckpoint(save_top_k=2), then
    test(ckpt_path="best") and load_from_checkpoint of the best file."""

    class Regressor(L.pl.LightningModule):
        def __init__(self, lr: float = 0.2):
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self.net(batch[0]), batch[1])
            self.log("train_loss", loss, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.mse_loss(self.net(batch[0]), batch[1]), prog_bar=True)

        def test_step(self, batch, batch_idx):
            self.log("test_loss", F.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "val_loss"}}

    g = torch.Generator().manual_seed(3)
    x = torch.randn(40, 4, generator=g)
    y = x @ torch.randn(4, 1, generator=g) + 0.5 * torch.randn(40, 1, generator=g)
    train, val = (
        DataLoader(TensorDataset(x[:24], y[:24]), batch_size=8),
        DataLoader(TensorDataset(x[24:], y[24:]), batch_size=8),
    )
    checkpoint = L.callbacks.ModelCheckpoint(
        dirpath=root / "ck", filename="{epoch}-{val_loss:.3f}", monitor="val_loss", save_top_k=2
    )
    early = L.callbacks.EarlyStopping(monitor="val_loss", patience=1, min_delta=1e-3)
    model = Regressor()
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=8, callbacks=[checkpoint, early], logger=L.loggers.CSVLogger(root))
    )
    trainer.fit(model, train, val)
    best = os.path.basename(checkpoint.best_model_path)
    fit = outcome(
        trainer, model, root, best=best, stopped=early.stopped_epoch, lr=trainer.optimizers[0].param_groups[0]["lr"]
    )
    trainer.test(model, val, ckpt_path="best")
    loaded = Regressor.load_from_checkpoint(checkpoint.best_model_path)
    return fit, outcome(trainer, model, root), dict(loaded.hparams), loaded.state_dict()


def predict_two_loaders_with_writer(L, root):
    """predict_step over two loaders, a BasePredictionWriter writing per batch and per epoch."""

    class Writer(L.callbacks.BasePredictionWriter):
        def __init__(self):
            super().__init__(write_interval="batch_and_epoch")
            self.seen = []

        def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
            self.seen.append((dataloader_idx, batch_idx, prediction["y"], list(batch_indices)))

        def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
            self.seen.append(([len(p) for p in predictions], batch_indices))

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 2)

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return {"y": self.layer(batch[0]), "idx": dataloader_idx}

    writer, model = Writer(), Model()
    loaders = [DataLoader(TensorDataset(torch.randn(n, 3)), batch_size=b) for n, b in ((5, 2), (4, 3))]
    trainer = L.pl.Trainer(**trainer_kwargs(root, logger=False, callbacks=[writer]))
    predictions = trainer.predict(model, dataloaders=loaders)
    return outcome(trainer, model, root, seen=writer.seen, predictions=predictions)


@pytest.mark.parametrize("program", [gan_manual_optimization, plateau_checkpoint_best, predict_two_loaders_with_writer])
def test_program_same_outcome(tmp_path, program):
    found = run_both(program, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []


@pytest.mark.slow
def test_ddp_program_same_outcome(lightning_ddp):
    """Two CPU processes under strategy="ddp" (tests/trainer/ddp_program_run.py, in conftest.py's
    ``lightning_ddp``: trainmesh's on 2 forks in one process group, which its Trainer finds started as
    torchrun's; Lightning's rank 0 a fork, whose ddp starts the second process itself, as its owners
    define it): sync_dist logging, all_gather, a value rank 0 logs alone with rank_zero_only=True
    (before: a TypeError)."""
    found = {
        name: torch.load(lightning_ddp / name / "ddp_program_run" / "outcome.pt", weights_only=False)
        for name in ("lightning", "trainmesh")
    }
    assert differences(found["lightning"], found["trainmesh"]) == []
