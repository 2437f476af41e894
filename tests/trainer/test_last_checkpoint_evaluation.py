"""``test(ckpt_path="last")`` after a fit whose ``ModelCheckpoint`` has no ``save_last``: Lightning 2.6 looks
for a file named ``last`` only, finds none, warns and tests the fit's final weights; trainmesh loaded the
newest top-k file (here the first epoch's, the best by ``mode="max"``) and reported another loss."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer

L = pytest.importorskip("lightning.pytorch")


def _module(framework):
    class Regression(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def _loss(self, batch):
            return ((self.layer(batch[0]) - batch[1]) ** 2).mean()

        def training_step(self, batch, batch_idx):
            return self._loss(batch)

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self._loss(batch))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", self._loss(batch))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return Regression


@pytest.mark.parametrize("save_last", [None, True])
def test_last_names_a_last_file_as_lightning_s_and_none_means_the_model_s_weights(save_last, tmp_path):
    x = torch.randn(40, 4, generator=torch.Generator().manual_seed(2))
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    results = []
    for framework in (L, tm):
        torch.manual_seed(0)
        model = _module(framework)()
        checkpoint = framework.callbacks.ModelCheckpoint(
            dirpath=tmp_path / framework.__name__, monitor="val_loss", mode="max", save_last=save_last
        )
        trainer = quiet_trainer(framework=framework, max_epochs=3, callbacks=[checkpoint], enable_checkpointing=True)
        trainer.fit(model, data, data)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tested = trainer.test(model, data, ckpt_path="last", verbose=False)
        said = [str(w.message) for w in caught if "no last checkpoint available" in str(w.message)]
        results.append((tested, said, trainer.ckpt_path and trainer.ckpt_path.rsplit("/", 1)[-1]))
    assert results[1] == results[0]
    assert bool(results[0][1]) is (save_last is None)  # Lightning's warning when there is no last file


def test_last_from_a_relative_folder_is_the_absolute_path_lightning_reports(tmp_path, monkeypatch):
    """``ModelCheckpoint(save_last=True)`` in the folder of a logger saving under a relative ``"out"`` (l-progs7
    p10, stored file 43773755918), then ``test(ckpt_path="last")``: Lightning lists the folder through fsspec,
    whose paths are absolute, so ``trainer.ckpt_path`` and its "Restoring states from the checkpoint path at ..."
    line hold ``<cwd>/out/lightning_logs/version_0/checkpoints/last.ckpt``. Before: trainmesh's was relative."""
    monkeypatch.chdir(tmp_path)
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(2))
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    paths = []
    for framework in (L, tm):
        checkpoint = framework.callbacks.ModelCheckpoint(save_last=True)  # its folder: the logger's
        logger = framework.loggers.CSVLogger(save_dir=f"out_{framework.__name__}")
        trainer = quiet_trainer(
            framework=framework, max_epochs=1, callbacks=[checkpoint], enable_checkpointing=True, logger=logger
        )
        trainer.fit(_module(framework)(), data)
        trainer.test(ckpt_path="last", dataloaders=data, verbose=False)
        paths.append(trainer.ckpt_path.replace(framework.__name__, "<framework>"))
    assert paths[0] == str(tmp_path / "out_<framework>" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")
    assert paths[1] == paths[0]


@pytest.mark.parametrize("fixed_folder", [False, True])
def test_fit_from_last_looks_where_this_fit_saves_as_lightning_s(fixed_folder, tmp_path):
    """A second Trainer's ``fit(ckpt_path="last")`` (scout-l2 q9): Lightning looks for ``last*.ckpt`` only in the
    folder its ModelCheckpoint saves to in this fit. In the logger's folder that is a new version folder: its
    warning, and training from scratch; in a fixed ``dirpath`` it resumes. Before: trainmesh resumed version_0's
    ``last.ckpt`` in both (other weights). ``Trainer(exact_resume=True)`` keeps trainmesh's search of the run."""
    x = torch.randn(24, 4, generator=torch.Generator().manual_seed(3))
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    runs = []
    for framework, own in ((L, {}), (tm, {}), (tm, {"exact_resume": True})):
        root = tmp_path / f"{framework.__name__}{len(runs)}"
        for epochs in (1, 2):
            torch.manual_seed(epochs)  # each Trainer's model starts elsewhere: a resume shows in the weights
            model = _module(framework)()
            checkpoint = framework.callbacks.ModelCheckpoint(
                dirpath=root / "ck" if fixed_folder else None, save_last=True
            )
            trainer = quiet_trainer(
                framework=framework,
                max_epochs=epochs,
                callbacks=[checkpoint],
                enable_checkpointing=True,
                logger=framework.loggers.CSVLogger(save_dir=root),
                default_root_dir=root,  # exact_resume's whole-run search looks there: not another test's files
                **own,
            )
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                trainer.fit(model, data, ckpt_path="last")
        said = [str(w.message) for w in caught if "no last checkpoint available" in str(w.message)]
        runs.append((trainer.ckpt_path and trainer.ckpt_path.replace(str(root), ""), said, model.layer.weight.detach()))
    lightning, named, exact = runs
    assert named[:2] == lightning[:2]
    assert torch.equal(named[2], lightning[2])
    assert bool(lightning[1]) is not fixed_folder  # a fresh start, warned, in a new version folder
    assert exact[0] == "/lightning_logs/version_0/checkpoints/last.ckpt" or fixed_folder  # trainmesh's own search
