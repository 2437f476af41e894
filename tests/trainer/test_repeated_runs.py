"""One Trainer run again, as mnist-hello-world does (fit, ``trainer.test()``, ``trainer.fit(model)`` again):
``validate()`` / ``test()`` / ``predict()`` without a model after a fit load the best checkpoint (with a
warning; stopping where no ModelCheckpoint is configured), and each fit calls ``configure_optimizers`` anew,
in Lightning 2.6 as in 1.9.5. Run under Lightning 2.6 and trainmesh and compared as data."""

from __future__ import annotations

import csv

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)


def evaluate_without_model(L, root):
    """Fit 3 epochs keeping the checkpoint of the *highest* validation loss (epoch 0's), then each
    evaluation without a model; the weights each leaves in the model."""

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

        def predict_step(self, batch, batch_idx):
            return self.layer(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    model = Model()
    best = L.callbacks.ModelCheckpoint(monitor="val_loss", mode="max")
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=3, logger=False, callbacks=[best]))
    trainer.fit(model, _loader(), _loader())
    fitted = {k: v.clone() for k, v in model.state_dict().items()}
    found = {"best": str(best.best_model_path).rsplit("/", 1)[-1]}
    found["validate"] = trainer.validate(dataloaders=_loader(), verbose=False)
    found["test"] = trainer.test(dataloaders=_loader(), verbose=False)
    found["predict"] = torch.cat(trainer.predict(dataloaders=_loader()))
    found["weights"] = {k: v.clone() for k, v in model.state_dict().items()}
    found["weights_moved"] = any(not torch.equal(fitted[k], v) for k, v in found["weights"].items())
    # the same, with no checkpoint callback: the error's type
    plain = L.pl.Trainer(**trainer_kwargs(root / "plain", max_epochs=1, logger=False, enable_checkpointing=False))
    plain.fit(Model(), _loader())
    try:
        plain.test(dataloaders=_loader(), verbose=False)
        found["without_checkpointing"] = "no error"
    except Exception as error:  # noqa: BLE001 - the type is what is compared
        found["without_checkpointing"] = type(error).__name__
    return found


def test_evaluation_without_a_model_loads_the_best_checkpoint_as_lightning(tmp_path):
    """The best file (epoch 0's), validate/test losses, predictions and the weights left in the model
    (epoch 0's, not the fit's end) equal Lightning 2.6.6's; without a ModelCheckpoint both raise
    ValueError. Before, trainmesh evaluated the fit's last weights."""
    found = run_both(evaluate_without_model, tmp_path)
    assert found["lightning"]["best"].startswith("epoch=0")
    assert found["lightning"]["weights_moved"]
    assert found["lightning"]["without_checkpointing"] == "ValueError"
    assert differences(found["lightning"], found["trainmesh"]) == []


def fit_again(L, root):
    """Three fits of one model on one Trainer (the second has nothing left to train; the third one more
    epoch after ``trainer.fit_loop.max_epochs = 2``), Adam with a StepLR: the configure_optimizers calls,
    the learning rate and Adam's step count the last fit ends with, and the weights."""
    calls = []

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            calls.append("configure_optimizers")
            optimizer = torch.optim.Adam(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    model = Model()
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=1, logger=False, enable_checkpointing=False))
    for _ in range(2):
        trainer.fit(model, _loader())
    trainer.fit_loop.max_epochs = 2
    trainer.fit(model, _loader())
    optimizer = trainer.optimizers[0]
    adam_steps = [float(s["step"]) for s in optimizer.state_dict()["state"].values()]
    return {
        "calls": calls,
        "global_step": trainer.global_step,
        "lr": optimizer.param_groups[0]["lr"],
        "adam_steps": adam_steps,
        "weights": {k: v.clone() for k, v in model.state_dict().items()},
    }


def test_each_fit_configures_fresh_optimizers_as_lightning(tmp_path):
    """configure_optimizers is called by each of the 3 fits; the third fit's Adam has taken its 4 steps
    alone (not 8), its StepLR starts again at 0.1, and the weights equal Lightning 2.6.6's bit for bit.
    Before, trainmesh called it once per model and carried the first fit's optimizer state on."""
    found = run_both(fit_again, tmp_path)
    assert found["lightning"]["calls"] == ["configure_optimizers"] * 3
    assert found["lightning"]["adam_steps"] == [4.0, 4.0]
    assert differences(found["lightning"], found["trainmesh"]) == []


def evaluation_step_logs(L, root):
    """autoencoder.py's ``self.log(..., on_step=True)`` in validation and test steps: a fit validating two
    loaders each epoch (3 batches each), then validate and test; metrics.csv's rows and logged_metrics."""

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val_loss", F.mse_loss(self.layer(batch[0]), batch[1]), on_step=True)

        def test_step(self, batch, batch_idx):
            self.log("test_loss", F.mse_loss(self.layer(batch[0]), batch[1]), on_step=True, on_epoch=False)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    model, logger = Model(), L.loggers.CSVLogger(root)
    kwargs = trainer_kwargs(root, max_epochs=2, logger=logger, enable_checkpointing=False, limit_val_batches=3)
    trainer = L.pl.Trainer(**kwargs)
    trainer.fit(model, _loader(), [_loader(), _loader()])
    # as floats, compared to a relative 1e-6: trainmesh's epoch means are summed in float64 (a documented difference)
    after_fit = {k: float(v) for k, v in trainer.logged_metrics.items()}
    trainer.validate(model, _loader(), verbose=False)
    after_validate = {k: float(v) for k, v in trainer.logged_metrics.items()}
    trainer.test(model, _loader(), verbose=False)
    after_test = {k: float(v) for k, v in trainer.logged_metrics.items()}
    with open(f"{logger.log_dir}/metrics.csv", newline="") as file:
        rows = [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(file)]
    return {"rows": rows, "after_fit": after_fit, "after_validate": after_validate, "after_test": after_test}


def test_evaluation_step_values_reach_the_loggers_as_lightning(tmp_path):
    """Each validation/test batch's on_step value goes to metrics.csv at Lightning's step (the loader's
    batches before it in the run: 0..5 over the fit's two validations, 0..2 in validate, 0..3 in test;
    no epoch column), named val_loss_step/dataloader_idx_N with two loaders; the rows and logged_metrics
    equal Lightning 2.6.6's. Before, trainmesh sent only the epoch values."""
    found = run_both(evaluation_step_logs, tmp_path)
    steps = [row["step"] for row in found["lightning"]["rows"] if "test_loss" in row]
    assert steps == [0, 1, 2, 3]
    assert differences(found["lightning"], found["trainmesh"]) == []
