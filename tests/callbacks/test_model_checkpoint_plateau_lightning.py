"""``ModelCheckpoint(save_on_train_epoch_end=False)`` beside a ``ReduceLROnPlateau`` watching a
validation metric, under Lightning 2.6 and trainmesh: the checkpoint of the validation after an
epoch's last batch is written in that validation's ``on_validation_end``, before the epoch's plateau
step, so its ``lr_schedulers`` and ``optimizer_states`` are Lightning's; a fit resumed from it goes on
without that step (Lightning's restart: the metric is not in the checkpoint) and ends at its lr."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, port, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _model(L):
    class Model(L.pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", torch.tensor(1.0))  # flat: the plateau halves the lr from the second epoch

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss"}}

    return Model()


def _loader():
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator))
    return DataLoader(data, batch_size=4)


def _run(name, root):
    L = port(name)
    L.pl.seed_everything(0)
    settings = dict(logger=False, enable_model_summary=False, num_sanity_val_steps=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checkpoint = L.callbacks.ModelCheckpoint(
            dirpath=root / "ckpt", save_on_train_epoch_end=False, save_top_k=-1, filename="{epoch}"
        )
        trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=3, callbacks=[checkpoint], **settings))
        trainer.fit(_model(L), _loader(), _loader())
        saved = {}
        for epoch in range(3):
            state = torch.load(root / "ckpt" / f"epoch={epoch}.ckpt", weights_only=False)
            scheduler = state["lr_schedulers"][0]
            saved[epoch] = {
                "scheduler": {k: scheduler[k] for k in ("last_epoch", "num_bad_epochs", "_last_lr", "best")},
                "optimizer_lr": state["optimizer_states"][0]["param_groups"][0]["lr"],
            }
        resumed = L.pl.Trainer(**trainer_kwargs(root, max_epochs=3, enable_checkpointing=False, **settings))
        resumed.fit(_model(L), _loader(), _loader(), ckpt_path=str(root / "ckpt" / "epoch=0.ckpt"))
    return {
        "saved": saved,
        "lr_after_fit": trainer.optimizers[0].param_groups[0]["lr"],
        "lr_after_resume": resumed.optimizers[0].param_groups[0]["lr"],
        "resumed_steps": resumed.global_step,
    }


def test_the_epoch_end_validation_checkpoint_holds_the_schedulers_before_the_plateau_step(tmp_path):
    theirs, ours = _run("lightning", tmp_path / "lightning"), _run("trainmesh", tmp_path / "trainmesh")
    assert theirs["saved"][0]["scheduler"]["last_epoch"] == 0  # the reference: saved before the step
    assert differences(theirs, ours) == []
