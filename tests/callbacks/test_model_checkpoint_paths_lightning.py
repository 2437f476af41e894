"""ModelCheckpoint's paths under Lightning 2.6 and trainmesh, run from a working folder: a ``dirpath``
given (relative, or through a link) is made absolute with its links resolved; the default callback's
folder stays as ``default_root_dir`` or the logger's ``save_dir`` gives it, relative where they are
(``save_dir/name/version/checkpoints``: a TensorBoardLogger's ``sub_dir`` left out, as Lightning's)
(``best_model_path``, ``kth_best_model_path``, ``best_k_models``' keys and the callback's state in the
checkpoint with it)."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import port

pytest.importorskip("lightning.pytorch")


def _model(pl):
    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Model()


def _loader():
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator))
    return DataLoader(data, batch_size=4)


def _paths(callback, here):
    def seen(path):
        return str(path).replace(here, "HERE")

    saved = torch.load(callback.best_model_path, weights_only=False)["callbacks"]
    (state,) = [value for key, value in saved.items() if key.startswith("ModelCheckpoint")]
    return {
        "dirpath": seen(callback.dirpath),
        "best": seen(callback.best_model_path),
        "kth": seen(callback.kth_best_model_path),
        "keys": sorted(seen(key) for key in callback.best_k_models),
        "state": {key: seen(state[key]) for key in ("dirpath", "best_model_path", "kth_best_model_path")},
        "state_keys": sorted(seen(key) for key in state["best_k_models"]),
    }


def _run(name, here):
    L = port(name)
    os.makedirs(here / "real")
    os.symlink(here / "real", here / "link")
    found = {}
    quiet = dict(enable_progress_bar=False, enable_model_summary=False, max_epochs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case, kwargs in {
            "given": dict(dirpath="ck", monitor="loss", save_top_k=2),
            "linked": dict(dirpath="link/ck", monitor="loss", save_top_k=2),
        }.items():
            L.pl.seed_everything(0)
            callback = L.callbacks.ModelCheckpoint(**kwargs)
            L.pl.Trainer(logger=False, callbacks=[callback], **quiet).fit(_model(L.pl), _loader())
            found[case] = _paths(callback, str(here))
        # a TensorBoardLogger's sub_dir is in its log_dir, not in the checkpoints' folder (Lightning's __resolve_ckpt_dir)
        tensorboard = L.loggers.TensorBoardLogger("tb", sub_dir="sub")
        for case, logger in {"default": False, "csv": L.loggers.CSVLogger("logs"), "sub_dir": tensorboard}.items():
            L.pl.seed_everything(0)
            trainer = L.pl.Trainer(logger=logger, default_root_dir="./root/", **quiet)
            trainer.fit(_model(L.pl), _loader())
            found[case] = _paths(trainer.checkpoint_callback, str(here))
        # one callback in a second Trainer whose logger has another version: it keeps the folder of its first
        # setup, as Lightning's __resolve_ckpt_dir returns self.dirpath once set
        callback = L.callbacks.ModelCheckpoint(monitor="loss")
        for version in (0, 5):
            L.pl.seed_everything(0)
            trainer = L.pl.Trainer(logger=L.loggers.CSVLogger("again", version=version), callbacks=[callback], **quiet)
            trainer.fit(_model(L.pl), _loader())
        found["reused"] = _paths(callback, str(here))
    return found


def test_checkpoint_paths_are_lightnings(tmp_path, monkeypatch):
    found = {}
    for name in ("lightning", "trainmesh"):
        here = tmp_path / name
        here.mkdir()
        monkeypatch.chdir(here)
        found[name] = _run(name, here)
    assert found["lightning"]["default"]["best"] == "root/checkpoints/epoch=1-step=4.ckpt"  # the reference
    assert found["lightning"]["sub_dir"]["dirpath"] == "tb/lightning_logs/version_0/checkpoints"
    assert found["lightning"]["reused"]["dirpath"] == "again/lightning_logs/version_0/checkpoints"
    assert found["trainmesh"] == found["lightning"]
