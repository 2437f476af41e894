"""The lines Lightning 2.6's checkpoint connector logs as a run loads a checkpoint ("Restoring
states from the checkpoint path at ...", then "Restored all states ..." for a fit or "Loaded model
weights ..." for validate/test/predict), said by trainmesh at the same points (mnist-hello-world's
``trainer.test(ckpt_path="best")`` printed them under Lightning only)."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning.pytorch")


def _program(pl, root, caplog):
    """fit, test(ckpt_path="best"), then a second Trainer resuming fit from the first's checkpoint;
    the checkpoint lines logged by each call, in order, the folder written as ROOT."""

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.l1(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.cross_entropy(self.l1(batch[0]), batch[1]))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", F.cross_entropy(self.l1(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)), 4)
    kwargs = dict(accelerator="cpu", devices=1, default_root_dir=root, enable_progress_bar=False)
    kwargs.update(enable_model_summary=False, logger=False)
    said = []

    def lines():
        found = [r.getMessage().replace(str(root), "ROOT") for r in caplog.records]
        caplog.clear()
        return [m for m in found if "checkpoint" in m and ("Restor" in m or "Loaded" in m)]

    trainer = pl.Trainer(max_epochs=1, **kwargs)
    trainer.fit(Model(), loader, loader)
    said.append(lines())
    trainer.test(ckpt_path="best", dataloaders=loader)
    said.append(lines())
    best = trainer.checkpoint_callback.best_model_path
    pl.Trainer(max_epochs=2, **kwargs).fit(Model(), loader, loader, ckpt_path=best)
    said.append(lines())
    pl.Trainer(**kwargs).validate(Model(), loader, ckpt_path=best)
    said.append(lines())
    return said


def test_checkpoint_lines_are_lightning_s(tmp_path, caplog):
    import lightning.pytorch as lightning

    import trainmesh

    caplog.set_level(logging.INFO, logger="lightning.pytorch")
    caplog.set_level(logging.INFO, logger="trainmesh")
    expected = _program(lightning, tmp_path / "lightning", caplog)
    assert expected[1] == [
        "Restoring states from the checkpoint path at ROOT/checkpoints/epoch=0-step=2.ckpt",
        "Loaded model weights from the checkpoint at ROOT/checkpoints/epoch=0-step=2.ckpt",
    ]
    assert _program(trainmesh, tmp_path / "trainmesh", caplog) == expected
