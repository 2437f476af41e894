"""Tuner.scale_batch_size against Lightning 2.6's (its own tests test_scale_batch_size.py::
test_auto_scale_batch_size_set_datamodule_attribute, ::test_dataloader_reset_with_scale_batch_size):
the batch size read from the last of Lightning's holders (model, its hparams, the data module, its
hparams) and set in all of them, so a data module keeping it in ``hparams`` is scaled, not left at its
size with the search's result only on the model; and after the search ``trainer.train_dataloader`` /
``trainer.val_dataloaders`` are the loaders made at the size found (the margin applied)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer
from trainmesh.tuner import Tuner

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.tuner import Tuner as PlTuner  # noqa: E402

_X = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))


def _run(framework, tuner, tmp_path, *, in_dm_hparams: bool, **search) -> tuple:
    class Data(framework.LightningDataModule):
        def __init__(self, batch_size: int) -> None:
            super().__init__()
            if in_dm_hparams:
                self.save_hyperparameters()
            else:
                self.batch_size = batch_size

        def _size(self) -> int:
            return self.hparams.batch_size if in_dm_hparams else self.batch_size

        def train_dataloader(self) -> DataLoader:
            return DataLoader(TensorDataset(_X, _X[:, :1]), batch_size=self._size())

        def val_dataloader(self) -> DataLoader:
            return DataLoader(TensorDataset(_X[:8], _X[:8, :1]), batch_size=self._size())

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size, self.layer = 2, torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            pass

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model, data = Model(), Data(2)
    trainer = quiet_trainer(framework=framework, max_epochs=1, default_root_dir=str(tmp_path))
    found = tuner(trainer).scale_batch_size(model, datamodule=data, steps_per_trial=1, **search)
    train, val = trainer.train_dataloader, trainer.val_dataloaders
    return found, model.batch_size, data._size(), train.batch_size, val.batch_size


@pytest.mark.parametrize(
    ("in_dm_hparams", "search"),
    [
        (True, {"mode": "power", "max_trials": 3}),  # was: data module left at 2, the loaders read 2
        (False, {"mode": "binsearch", "max_trials": 3}),  # was: train loader at 8, not the 7 found
    ],
)
def test_the_size_found_is_where_lightning_puts_it(tmp_path, in_dm_hparams, search):
    theirs = _run(pl, PlTuner, tmp_path / "pl", in_dm_hparams=in_dm_hparams, **search)
    ours = _run(tm, Tuner, tmp_path / "tm", in_dm_hparams=in_dm_hparams, **search)
    assert ours == theirs
    assert theirs[0] > 2
