"""EarlyStopping cases from Lightning 2.6.5's own tests (tests_pytorch/callbacks/test_early_stopping.py),
run under Lightning 2.6.6 and under trainmesh: the epoch it stops at when the Module turns validation
off with ``model.validation_step = None`` (Lightning's ``is_overridden`` reads a hook set to None as
absent), and the exception a bad ``mode`` raises."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")

LOSSES = [0.5, 0.5, 0.6, 0.6, 0.5, 0.5, 0.6, 0.6, 0.6, 0.6]  # Lightning's loss_values0: stops at epoch 4


def stopped(L, root, patience):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)
            self.validated = 0

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.validated += 1

        def on_train_epoch_end(self):
            self.log("train_loss", torch.tensor(LOSSES[self.current_epoch]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Model()
    model.validation_step = None
    data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    stop = L.callbacks.EarlyStopping(monitor="train_loss", patience=patience, check_on_train_epoch_end=True)
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=10, callbacks=[stop], logger=False))
    trainer.fit(model, data, data)
    return {"epoch": trainer.current_epoch, "stopped_epoch": stop.stopped_epoch, "validated": model.validated}


@pytest.mark.parametrize("patience", [1, 3])
def test_validation_step_set_to_none_turns_validation_off(tmp_path, patience):
    """Before: trainmesh called the None (``TypeError: 'NoneType' object is not callable``)."""
    found = run_both(lambda L, root: stopped(L, root, patience), tmp_path)
    assert found["lightning"]["validated"] == 0
    assert found["trainmesh"] == found["lightning"]


def mode_refused(L, root):
    from importlib import import_module

    exceptions = import_module(f"{L.pl.__name__}.utilities.exceptions")
    try:
        L.callbacks.EarlyStopping(monitor="foo", mode="unknown_option")
    except exceptions.MisconfigurationException:
        return "MisconfigurationException"
    except Exception as exc:  # noqa: BLE001 - which type is the point
        return type(exc).__name__
    return "accepted"


def test_a_bad_mode_raises_what_lightning_raises(tmp_path):
    found = run_both(mode_refused, tmp_path)
    assert found["trainmesh"] == found["lightning"] == "MisconfigurationException"
