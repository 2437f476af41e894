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


def signed_min_delta(L, root, mode, min_delta):
    values = [1.0, 0.985, 0.99, 0.97, 0.975, 0.96, 0.962]
    values = values if mode == "min" else [-v for v in values]

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def on_train_epoch_end(self):
            self.log("v", torch.tensor(values[self.current_epoch]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    stop = L.callbacks.EarlyStopping(
        monitor="v", mode=mode, min_delta=min_delta, patience=1, check_on_train_epoch_end=True
    )
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=len(values), callbacks=[stop], logger=False))
    trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    return [str(stop.min_delta), stop.stopped_epoch, stop.wait_count, float(stop.best_score), trainer.current_epoch]


@pytest.mark.parametrize(("mode", "min_delta"), [("min", -0.02), ("max", -0.02), ("min", 0.0)])
def test_a_signed_min_delta_is_taken_and_kept_as_lightning(tmp_path, mode, min_delta):
    """Lightning keeps ``min_delta`` negated for mode "min" (a program reading it sees -0.0 for the default)
    and takes a negative one as a tolerance (l-progs17; before, trainmesh refused a negative min_delta and
    kept the default as 0.0)."""
    found = run_both(lambda L, root: signed_min_delta(L, root, mode, min_delta), tmp_path)
    assert found["trainmesh"] == found["lightning"]


def time_based(L, root, check_on_train_epoch_end):
    calls = []

    class Spy(L.pl.Callback):
        def setup(self, trainer, pl_module, stage):
            calls.append("setup")

        def on_fit_start(self, trainer, pl_module):
            calls.append("on_fit_start")

        def on_exception(self, trainer, pl_module, exception):
            calls.append(f"on_exception {type(exception).__name__}")

        def teardown(self, trainer, pl_module, stage):
            calls.append("teardown")

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.log("v", self.net(batch[0]).pow(2).mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    stop = L.callbacks.EarlyStopping(monitor="v", check_on_train_epoch_end=check_on_train_epoch_end)
    kwargs = trainer_kwargs(root, max_epochs=2, val_check_interval="00:00:01:00", callbacks=[Spy(), stop], logger=False)
    trainer = L.pl.Trainer(**kwargs)
    data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    try:
        trainer.fit(Model(), data, data)
        raised = None
    except AttributeError as exc:
        raised = str(exc)
    return {"raised": raised, "calls": calls, "step": trainer.global_step, "status": str(trainer.state.status)}


@pytest.mark.parametrize("check_on_train_epoch_end", [None, False])
def test_a_time_based_interval_stops_at_setup_where_lightning_decides_when_to_check(tmp_path, check_on_train_epoch_end):
    """Lightning 2.6.6's EarlyStopping decides ``check_on_train_epoch_end=None`` in its ``setup`` from
    ``trainer.val_check_interval``, which a trainer with a time-based interval lacks: the fit stops there
    with AttributeError, before any step (on_exception, no teardown); given, the fit trains. Before, trainmesh
    decided at each check and trained."""
    found = run_both(lambda L, root: time_based(L, root, check_on_train_epoch_end), tmp_path)
    lightning, ours = found["lightning"], found["trainmesh"]
    if check_on_train_epoch_end is None:
        assert lightning["raised"] == "'Trainer' object has no attribute 'val_check_interval'"
        assert ours["raised"].startswith(lightning["raised"] + ":")  # and why, and what to read instead
        assert lightning["calls"] == ["setup", "on_exception AttributeError"] and lightning["step"] == 0
    else:
        assert lightning["raised"] is None and lightning["step"] == 4
    assert {**ours, "raised": None} == {**lightning, "raised": None}
