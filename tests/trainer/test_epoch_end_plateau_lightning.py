"""A ``ReduceLROnPlateau`` with interval "epoch" watching a training metric, and ModelCheckpoint
saving in ``on_train_epoch_end`` (no validation), under Lightning 2.6 and trainmesh: Lightning steps
the plateau scheduler after every ``on_train_epoch_end`` hook, the monitoring callbacks' included,
so the checkpoint holds the scheduler before that epoch's step (``last_epoch`` one behind the fit's);
a fit resumed from it goes on with the next epoch without that step (Lightning's restart: the metric
is not in the checkpoint), and ends where Lightning's resume ends."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, port, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _model(L, seen):
    class Model(L.pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            self.log("flat", 1.0, on_step=False, on_epoch=True)  # flat: the plateau halves the lr each epoch
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def on_train_epoch_start(self):
            seen.append((self.current_epoch, self.lr_schedulers().last_epoch, self.optimizers().param_groups[0]["lr"]))

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "flat"}}

    return Model()


def _loader():
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator))
    return DataLoader(data, batch_size=4)


def _run(name, root):
    L = port(name)
    L.pl.seed_everything(0)
    settings = dict(logger=False, enable_model_summary=False, limit_val_batches=0)
    seen, resumed_seen = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checkpoint = L.callbacks.ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1, filename="{epoch}")
        trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=3, callbacks=[checkpoint], **settings))
        trainer.fit(_model(L, seen), _loader())
        saved = {}
        for epoch in range(3):
            state = torch.load(root / "ckpt" / f"epoch={epoch}.ckpt", weights_only=False)
            scheduler = state["lr_schedulers"][0]
            saved[epoch] = {k: scheduler[k] for k in ("last_epoch", "num_bad_epochs", "_last_lr", "best")}
        resumed = L.pl.Trainer(**trainer_kwargs(root, max_epochs=3, enable_checkpointing=False, **settings))
        resumed.fit(_model(L, resumed_seen), _loader(), ckpt_path=str(root / "ckpt" / "epoch=0.ckpt"))
    return {
        "saved": saved,
        "seen": seen,
        "resumed_seen": resumed_seen,
        "last_epoch_after_fit": trainer.lr_scheduler_configs[0].scheduler.last_epoch,
        "lr_after_fit": trainer.optimizers[0].param_groups[0]["lr"],
        "lr_after_resume": resumed.optimizers[0].param_groups[0]["lr"],
        "resumed_steps": resumed.global_step,
    }


def test_the_plateau_scheduler_steps_after_the_monitoring_callbacks_as_lightnings(tmp_path):
    theirs, ours = _run("lightning", tmp_path / "lightning"), _run("trainmesh", tmp_path / "trainmesh")
    assert theirs["saved"][0]["last_epoch"] == 0  # the reference: saved before the epoch's plateau step
    assert differences(theirs, ours) == []
