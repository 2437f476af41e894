"""A fit resumed from a checkpoint past its ``max_epochs`` (Lightning 2.6.5's own
tests_pytorch/callbacks/test_early_stopping.py::test_resume_early_stopping_from_checkpoint), under
Lightning 2.6.6 and trainmesh: Lightning stops with ``MisconfigurationException`` ("You restored a
checkpoint with current_epoch=..."); at ``max_epochs`` itself it ends without training."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def resumed(L, root):
    from importlib import import_module

    exceptions = import_module(f"{L.pl.__name__}.utilities.exceptions")

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    every = L.callbacks.ModelCheckpoint(dirpath=root, filename="{epoch}", save_top_k=-1, monitor="epoch", mode="max")
    L.pl.Trainer(**trainer_kwargs(root, max_epochs=3, callbacks=[every], logger=False)).fit(Model(), data)
    outcomes = []
    for epoch, max_epochs in ((2, 1), (1, 1), (0, 1)):
        trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=max_epochs, logger=False, enable_checkpointing=False))
        try:
            trainer.fit(Model(), data, ckpt_path=str(root / f"epoch={epoch}.ckpt"))
            outcomes.append(("ran", trainer.global_step))
        except exceptions.MisconfigurationException as exc:
            outcomes.append(("refused", str(exc).split(",")[0]))
    return outcomes


def test_resuming_past_max_epochs_is_refused_as_by_lightning(tmp_path):
    """Before: trainmesh's fit ended at once, as if it had trained."""
    found = run_both(resumed, tmp_path)
    assert found["lightning"][0] == ("refused", "You restored a checkpoint with current_epoch=2")
    assert found["trainmesh"] == found["lightning"]
