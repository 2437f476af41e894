"""A weights-only checkpoint (``ModelCheckpoint(save_weights_only=True)``) holds the data module's
hyperparameters and state as Lightning 2.6's does (naamiinepal/IPV-detection's config saves weights
only, with a data module that calls ``save_hyperparameters``); trainmesh's left them out, so
``LightningDataModule.load_from_checkpoint`` could not read the file. Its keys, and those of
``trainer.save_checkpoint(weights_only=True)``, are Lightning's (no ``optimizer_states``, which trainmesh
wrote as ``[]``), beside trainmesh's own documented ones."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer

L = pytest.importorskip("lightning.pytorch")


def _classes(framework):
    class Data(framework.LightningDataModule):
        def __init__(self, batch_size: int = 8, fold: int = 1):
            super().__init__()
            self.save_hyperparameters()

        def train_dataloader(self):
            x = torch.randn(16, 3, generator=torch.Generator().manual_seed(0))
            return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=self.hparams.batch_size)

        def state_dict(self):
            return {"fold": self.hparams.fold}

    class Model(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return ((self.layer(batch[0]) - batch[1]) ** 2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Data, Model


_TRAINMESH_KEYS = {
    "format",
    "trainmesh_version",
    "trainmesh_run",
    "weights_only",
}  # documented: lightning.md's checkpoint keys


def test_a_weights_only_checkpoint_holds_the_data_module_s_hyperparameters_as_lightning_s(tmp_path):
    entries, keys = [], []
    for framework in (L, tm):
        data_class, model_class = _classes(framework)
        checkpoint = framework.callbacks.ModelCheckpoint(dirpath=tmp_path / framework.__name__, save_weights_only=True)
        trainer = quiet_trainer(framework=framework, max_epochs=1, callbacks=[checkpoint], enable_checkpointing=True)
        trainer.fit(model_class(), datamodule=data_class(batch_size=4, fold=3))
        saved = torch.load(checkpoint.best_model_path, weights_only=False)
        trainer.save_checkpoint(tmp_path / framework.__name__ / "own.ckpt", weights_only=True)
        own = torch.load(tmp_path / framework.__name__ / "own.ckpt", weights_only=False)
        keys.append([sorted(set(saved) - _TRAINMESH_KEYS), sorted(set(own) - _TRAINMESH_KEYS)])
        names = ("datamodule_hparams_name", "datamodule_hyper_parameters", data_class.__qualname__)
        entries.append({k.rsplit(".", 1)[-1]: saved.get(k) for k in names})
        assert data_class.load_from_checkpoint(checkpoint.best_model_path).hparams.fold == 3
    assert keys[1] == keys[0]
    assert "optimizer_states" not in keys[1][0]
    assert (
        entries[1]
        == entries[0]
        == {
            "datamodule_hparams_name": "kwargs",
            "datamodule_hyper_parameters": {"batch_size": 4, "fold": 3},
            "Data": {"fold": 3},
        }
    )
