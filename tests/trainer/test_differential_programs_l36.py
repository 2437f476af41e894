"""Lightning 2.6 programs using the common API together (written for issue 36, branch l36; not shown
to trainmesh before): a DataModule and a module saving their hyperparameters, ModelCheckpoint with
EarlyStopping, a CSVLogger, validate / test / predict after fit, ``load_from_checkpoint``; the module's
own hooks recorded in order; a resumed fit. Each runs under Lightning 2.6 and under its port
(``helpers/programs.py``) and is compared as data: weights bit for bit, metric dictionaries,
metrics.csv rows, files, checkpoint contents, hook calls."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

from helpers.differential import recorder_class
from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")

SHARED_KEYS = ("state_dict", "optimizer_states", "lr_schedulers", "epoch", "global_step")
SHARED_KEYS += ("hyper_parameters", "hparams_name", "datamodule_hyper_parameters", "datamodule_hparams_name")
# what Lightning 2.6's ModelCheckpoint and EarlyStopping keep (trainmesh's keep more, for its resume)
CHECKPOINT_STATE = ("monitor", "best_model_score", "best_model_path", "current_score", "best_k_models")
CHECKPOINT_STATE += ("kth_best_model_path", "kth_value", "last_model_path")
STOPPING_STATE = ("wait_count", "stopped_epoch", "best_score", "patience", "stopping_reason", "stopping_reason_message")


def _relative(value, root):
    """Paths under the program's folder as relative ones (the two runs write to different folders)."""
    if isinstance(value, dict):
        return {_relative(k, root): _relative(v, root) for k, v in value.items()}
    return os.path.relpath(value, root) if isinstance(value, str) and value.startswith(str(root)) else value


def _data(n, features=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    return x, (x[:, :3].sum(1) > 0).long()


def _checkpoint_contents(path, root, checkpoint_key, stopping_key):
    saved = torch.load(path, weights_only=False)
    return {
        "keys": sorted(k for k in saved if k in SHARED_KEYS),
        **{k: saved[k] for k in SHARED_KEYS if k in saved and k not in ("optimizer_states", "lr_schedulers")},
        "optimizer_state": saved["optimizer_states"][0]["state"],
        "lr_schedulers": saved["lr_schedulers"],
        "checkpoint": {k: _relative(v, root) for k, v in saved["callbacks"][checkpoint_key].items() if k in CHECKPOINT_STATE},
        "stopping": {k: v for k, v in saved["callbacks"][stopping_key].items() if k in STOPPING_STATE},
    }  # fmt: skip


def classifier_with_datamodule(L, root):
    """A DataModule (save_hyperparameters, setup(stage) splitting a data set) and a classifier
    (save_hyperparameters, Adam with a StepLR, train/val/test/predict steps logging step and epoch
    metrics), ModelCheckpoint(monitor="val_loss", save_top_k=2) with EarlyStopping(patience=1) and a
    CSVLogger; after fit: validate and test from the best checkpoint, predict, then
    load_from_checkpoint(best) tested in a new Trainer."""

    class Data(L.pl.LightningDataModule):
        def __init__(self, batch_size: int = 8, samples: int = 96):
            super().__init__()
            self.save_hyperparameters()

        def setup(self, stage):
            x, y = _data(self.hparams.samples)
            full = TensorDataset(x, y)
            self.train_set, self.val_set, self.test_set = random_split(
                full, [64, 16, 16], torch.Generator().manual_seed(3)
            )

        def train_dataloader(self):
            return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

        def val_dataloader(self):
            return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

        def test_dataloader(self):
            return DataLoader(self.test_set, batch_size=self.hparams.batch_size)

        def predict_dataloader(self):
            return DataLoader(self.test_set, batch_size=5)

    class Classifier(L.pl.LightningModule):
        def __init__(self, hidden: int = 16, lr: float = 0.02, dropout: float = 0.1):
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Sequential(nn.Linear(6, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 2))

        def forward(self, x):
            return self.net(x)

        def _shared(self, batch, stage):
            x, y = batch
            logits = self(x)
            loss = F.cross_entropy(logits, y)
            acc = (logits.argmax(1) == y).float().mean()
            self.log_dict({f"{stage}_loss": loss, f"{stage}_acc": acc}, prog_bar=stage == "val")
            return loss

        def training_step(self, batch, batch_idx):
            loss = F.cross_entropy(self(batch[0]), batch[1])
            self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
            return loss

        def validation_step(self, batch, batch_idx):
            return self._shared(batch, "val")

        def test_step(self, batch, batch_idx):
            return self._shared(batch, "test")

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self(batch[0]).softmax(-1)

        def configure_optimizers(self):
            optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)]

    calls = []
    checkpoint = L.callbacks.ModelCheckpoint(
        dirpath=root / "ckpt", monitor="val_loss", save_top_k=2, filename="{epoch}-{val_loss:.3f}", save_last=True
    )
    stopping = L.callbacks.EarlyStopping(monitor="val_loss", patience=1, min_delta=0.03)
    logger = L.loggers.CSVLogger(root, name="logs", version=0)
    callbacks = [recorder_class(L.pl.Callback, calls)(), checkpoint, stopping]
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=8, callbacks=callbacks, logger=logger, log_every_n_steps=3)
    )
    data, model = Data(), Classifier()
    trainer.fit(model, datamodule=data)
    fitted = outcome(trainer, model, root)
    validated = trainer.validate(datamodule=data, ckpt_path="best", verbose=False)
    tested = trainer.test(datamodule=data, ckpt_path="best", verbose=False)
    predicted = trainer.predict(model, datamodule=data)
    after = outcome(trainer, model, root)
    best = checkpoint.best_model_path
    loaded = Classifier.load_from_checkpoint(best)
    tester = L.pl.Trainer(**trainer_kwargs(root / "again", logger=False))
    again = tester.test(loaded, datamodule=Data.load_from_checkpoint(best), verbose=False)
    return {
        "fit": fitted,
        "after": after,
        "runs": (validated, tested, torch.cat(predicted), again),
        "calls": calls,
        "stopped_epoch": stopping.stopped_epoch,
        "hparams.yaml": [path.read_text() for path in sorted(root.rglob("hparams.yaml"))],
        "log_dir": (_relative(trainer.log_dir, root), _relative(trainer.logger.log_dir, root)),
        "best": (_relative(best, root), checkpoint.best_model_score, _relative(dict(checkpoint.best_k_models), root)),
        "best_checkpoint": _checkpoint_contents(best, root, checkpoint.state_key, stopping.state_key),
        "last_checkpoint": _checkpoint_contents(
            checkpoint.last_model_path, root, checkpoint.state_key, stopping.state_key
        ),
        "loaded": (dict(loaded.hparams), {k: v for k, v in loaded.state_dict().items()}),
    }


def early_stopping_reasons(L, root):
    """A metric logged from a script of values, one per epoch, watched by EarlyStopping four ways
    (patience, stopping_threshold, divergence_threshold, a NaN), verbose: each fit's epochs, the
    callback's checkpoint state (its reason and message) and the state a new callback restores."""

    class Scripted(L.pl.LightningModule):
        def __init__(self, values):
            super().__init__()
            self.values, self.net = values, nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            self.log("score", torch.tensor(self.values[self.current_epoch]))
            return self.net(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    loader = DataLoader(TensorDataset(torch.ones(2, 2)), batch_size=2)
    settings = {
        "patience": ({"patience": 2, "min_delta": 0.05}, [1.0, 0.9, 0.88, 0.87, 0.5]),
        "threshold": ({"mode": "max", "stopping_threshold": 0.8}, [0.5, 0.7, 0.85, 0.9]),
        "divergence": ({"divergence_threshold": 2.0}, [1.0, 1.5, 3.0, 1.0]),
        "nan": ({"patience": 5}, [1.0, float("nan"), 0.5]),
        # 0.9 + 0.1 rounds to 1.0 in the metric's float32: no improvement, a stop at epoch 1 (in
        # float64 it is one, and the run went on)
        "delta_in_float32": ({"patience": 1, "min_delta": 0.1}, [1.0, 0.9, 0.85]),
    }
    found = {}
    for name, (kwargs, values) in settings.items():
        stopping = L.callbacks.EarlyStopping(monitor="score", verbose=True, **kwargs)
        trainer = L.pl.Trainer(
            **trainer_kwargs(root / name, max_epochs=len(values), callbacks=[stopping], logger=False)
        )
        trainer.fit(Scripted(values), loader)
        restored = L.callbacks.EarlyStopping(monitor="score", patience=9)
        restored.load_state_dict(stopping.state_dict())
        kept = (restored.wait_count, restored.stopped_epoch, float(restored.best_score), restored.patience)
        # the attributes a program reads, as their types show them: an enum member, a 0-d tensor
        seen = (repr(stopping.stopping_reason), repr(stopping.best_score), repr(restored.stopping_reason))
        found[name] = (trainer.current_epoch, stopping.state_dict(), kept, restored.stopping_reason_message, seen)
    return found


REASONS = {
    "patience": "patience_exhausted",
    "threshold": "stopping_threshold",
    "divergence": "divergence_threshold",
    "nan": "non_finite_metric",
    "delta_in_float32": "patience_exhausted",
}


def test_early_stopping_reasons_are_lightning_s(tmp_path):
    """Before: the state lacked ``patience`` (a resume kept the new callback's, Lightning restores the
    saved one), held the reason as a name where Lightning's checkpoints hold its number, a float
    best score, and trainmesh's own message, also after an improvement (Lightning's: only a stop's).
    Then: ``stopping_reason`` a string where Lightning's is its ``EarlyStoppingReason``, ``best_score`` a
    float, and the min_delta test made in float64 (``delta_in_float32`` trained on to epoch 3)."""
    found = run_both(early_stopping_reasons, tmp_path)
    theirs = found["lightning"]
    assert [theirs[name][1]["stopping_reason"] for name in REASONS] == [3, 1, 2, 4, 3]
    assert theirs["delta_in_float32"][1]["stopped_epoch"] == 1  # Lightning stopped at epoch 1
    assert theirs["patience"][2][3] == 2  # the saved patience, not the new callback's 9
    assert differences(theirs, found["trainmesh"]) == []
    from trainmesh.callbacks import EarlyStopping

    for name, (_, state, kept, _, _) in theirs.items():  # Lightning's own state, restored by trainmesh
        restored = EarlyStopping(monitor="score", patience=9)
        restored.load_state_dict(state)
        assert (restored.wait_count, restored.stopped_epoch, float(restored.best_score), restored.patience) == kept
        assert restored.stopping_reason.name == REASONS[name].upper()


def test_classifier_with_datamodule_same_outcome(tmp_path):
    found = run_both(classifier_with_datamodule, tmp_path)
    assert found["lightning"]["stopped_epoch"] > 0  # EarlyStopping stopped the fit
    assert differences(found["lightning"], found["trainmesh"]) == []


MODULE_HOOKS = (
    "setup", "configure_optimizers", "on_fit_start", "on_train_start", "on_train_epoch_start", "on_before_backward",
    "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad", "on_validation_start",
    "on_validation_epoch_start", "on_validation_epoch_end", "on_validation_end", "on_train_epoch_end",
    "on_save_checkpoint", "on_load_checkpoint", "on_train_end", "on_fit_end", "teardown",
)  # fmt: skip


def module_hooks_then_resume(L, root):
    """The module's own hooks recorded in order (batch hooks with their index), a OneCycleLR stepping
    every batch, clipping by norm, validation on two batches, ModelCheckpoint(save_last=True) and a
    CSVLogger; then a second Trainer resuming from last.ckpt for one more epoch. The loader shuffles
    with its own generator: with the global one, the resumed epoch's order differs on purpose
    (trainmesh's resume restores the checkpoint's generators, Lightning's leaves them as they are)."""

    class Recorded(L.pl.LightningModule):
        def __init__(self, lr: float = 0.05):
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
            self.calls = []

        def training_step(self, batch, batch_idx):
            loss = F.cross_entropy(self.net(batch[0]), batch[1])
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.cross_entropy(self.net(batch[0]), batch[1]))

        def on_train_batch_start(self, batch, batch_idx):
            self.calls.append(("on_train_batch_start", batch_idx))

        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.calls.append(("on_train_batch_end", batch_idx, round(float(outputs["loss"]), 6)))

        def configure_optimizers(self):
            self.calls.append("configure_optimizers")
            optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
            steps = self.trainer.estimated_stepping_batches
            schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.2, total_steps=int(steps) + 8)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def record(name):
        def hook(self, *args, **kwargs):
            self.calls.append(name)
            return getattr(L.pl.LightningModule, name)(self, *args, **kwargs)

        return hook

    for name in MODULE_HOOKS:
        if name != "configure_optimizers":
            setattr(Recorded, name, record(name))  # the program's own class: every hook recorded alike

    x, y = _data(40, seed=2)
    train = DataLoader(
        TensorDataset(x[:32], y[:32]), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(5)
    )
    val = DataLoader(TensorDataset(x[32:], y[32:]), batch_size=4)
    checkpoint = L.callbacks.ModelCheckpoint(dirpath=root / "ckpt", save_last=True)
    settings = dict(gradient_clip_val=0.5, limit_val_batches=2, log_every_n_steps=2)
    logger = L.loggers.CSVLogger(root, name="logs", version=0)
    first = L.pl.Trainer(**trainer_kwargs(root, max_epochs=2, callbacks=[checkpoint], logger=logger, **settings))
    model = Recorded()
    first.fit(model, train, val)
    fitted = outcome(first, model, root)
    resumed_model = Recorded()
    logger = L.loggers.CSVLogger(root, name="logs", version=1)
    second = L.pl.Trainer(**trainer_kwargs(root, max_epochs=3, logger=logger, enable_checkpointing=False, **settings))
    second.fit(resumed_model, train, val, ckpt_path=checkpoint.last_model_path)
    lrs = [group["lr"] for group in second.optimizers[0].param_groups]
    return {
        "first": fitted,
        "calls": (model.calls, resumed_model.calls),
        "second": outcome(second, resumed_model, root, lrs=lrs),
    }


def test_module_hooks_then_resume_same_outcome(tmp_path):
    found = run_both(module_hooks_then_resume, tmp_path)
    assert "on_load_checkpoint" in found["lightning"]["calls"][1]
    assert differences(found["lightning"], found["trainmesh"]) == []


def outputs_kept_by_the_module(L, root):
    """The 2.x pattern that replaced 1.x's epoch-end hook taking the outputs: outputs kept in a list by
    the steps and reduced in ``on_validation_epoch_end`` / ``on_test_epoch_end`` (logged there),
    ReduceLROnPlateau on that epoch metric, LearningRateMonitor, ModelCheckpoint(monitor="val_acc", mode="max"); then
    validate without a checkpoint, test from "last", predict returning dicts."""

    class Kept(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 2))
            self.outputs = []

        def training_step(self, batch, batch_idx):
            loss = F.cross_entropy(self.net(batch[0]), batch[1])
            self.log("train_loss", loss, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.outputs.append((self.net(batch[0]).argmax(1) == batch[1]).float())

        def on_validation_epoch_end(self):
            self.log("val_acc", torch.cat(self.outputs).mean(), prog_bar=True)
            self.outputs.clear()

        test_step = validation_step

        def on_test_epoch_end(self):
            self.log("test_acc", torch.cat(self.outputs).mean())
            self.outputs.clear()

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return {"label": self.net(batch[0]).argmax(1), "index": batch_idx}

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.3)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", patience=0, factor=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "val_acc"}}

    x, y = _data(60, seed=4)
    train = DataLoader(TensorDataset(x[:40], y[:40]), batch_size=8, shuffle=True)
    val = DataLoader(TensorDataset(x[40:], y[40:]), batch_size=6)
    checkpoint = L.callbacks.ModelCheckpoint(dirpath=root / "ckpt", monitor="val_acc", mode="max", save_last=True)
    callbacks = [checkpoint, L.callbacks.LearningRateMonitor()]
    logger = L.loggers.CSVLogger(root, name="logs", version=0)
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=4, callbacks=callbacks, logger=logger, log_every_n_steps=2)
    )
    model = Kept()
    trainer.fit(model, train, val)
    fitted = outcome(trainer, model, root)
    validated = trainer.validate(model, val, verbose=False)
    tested = trainer.test(dataloaders=val, ckpt_path="last", verbose=False)
    predicted = trainer.predict(model, val)
    best = (_relative(checkpoint.best_model_path, root), checkpoint.best_model_score)
    last_step = torch.load(checkpoint.last_model_path, weights_only=False)["global_step"]
    after = outcome(trainer, model, root)
    return {"fit": fitted, "runs": (validated, tested, predicted), "after": after, "best": best, "last_step": last_step}


def test_outputs_kept_by_the_module_same_outcome(tmp_path):
    """Equal, last.ckpt included: both write it only beside a top-k save (Lightning 2.6's rule), so with
    the best at step 15 of 20 it holds step 15, and test(ckpt_path="last") tests those weights (the weights after the test are those too)."""
    found = run_both(outputs_kept_by_the_module, tmp_path)
    assert found["lightning"]["last_step"] == 15
    assert differences(found["lightning"], found["trainmesh"]) == []
