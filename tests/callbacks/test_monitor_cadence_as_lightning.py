"""When EarlyStopping checks and ModelCheckpoint saves with their default cadence
(``check_on_train_epoch_end=None``, ``save_on_train_epoch_end=None``), as Lightning 2.6 decides:
after each validation run when validation runs more than once an epoch or not every epoch, at
the epoch's end otherwise. The same program runs under Lightning and trainmesh; the stop point,
the files kept and the best score are compared."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

CADENCES = {
    "four_validations_an_epoch": {"val_check_interval": 0.25},
    "every_second_epoch": {"check_val_every_n_epoch": 2},
    "once_an_epoch": {},
}


def _model_class(framework):
    class Model(framework.LightningModule):
        def __init__(self, lr: float) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.lr = lr

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val", torch.nn.functional.mse_loss(self.layer(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    return Model


def _fit(framework, callbacks, lr: float, **settings):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer = framework.Trainer(
        max_epochs=4,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=any(type(c).__name__ == "ModelCheckpoint" for c in callbacks),
        callbacks=callbacks,
        **settings,
    )
    trainer.fit(_model_class(framework)(lr), DataLoader(data, batch_size=4), DataLoader(data, batch_size=16))
    return trainer


def _early_stopping(framework, callbacks_module, settings):
    stopper = callbacks_module.EarlyStopping("val", patience=1)
    trainer = _fit(framework, [stopper], 0.5, **settings)
    return trainer.global_step, stopper.stopped_epoch, stopper.wait_count, round(float(stopper.best_score), 5)


def _checkpoints(framework, callbacks_module, settings, directory):
    checkpoint = callbacks_module.ModelCheckpoint(dirpath=directory, monitor="val", save_top_k=2)
    _fit(framework, [checkpoint], 0.05, **settings)
    return (
        sorted(os.listdir(directory)),
        os.path.basename(checkpoint.best_model_path),
        round(float(checkpoint.best_model_score), 5),
    )


@pytest.mark.parametrize("cadence", sorted(CADENCES))
def test_default_cadence_stops_and_saves_where_lightning_does(cadence, tmp_path) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import lightning.pytorch.callbacks as lightning_callbacks

    import trainmesh
    import trainmesh.callbacks as trainmesh_callbacks

    settings = CADENCES[cadence]
    assert _early_stopping(trainmesh, trainmesh_callbacks, settings) == _early_stopping(
        lightning, lightning_callbacks, settings
    )
    ours = _checkpoints(trainmesh, trainmesh_callbacks, settings, tmp_path / "trainmesh")
    theirs = _checkpoints(lightning, lightning_callbacks, settings, tmp_path / "lightning")
    # four_validations_an_epoch: a save after a mid-epoch validation is made in on_validation_end, as
    # Lightning's (before: at the next batch's end, epoch=2-step=41 where Lightning writes step=40)
    assert ours == theirs
