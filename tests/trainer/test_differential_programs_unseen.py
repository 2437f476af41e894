"""Six more Lightning 2.6 programs written as users write them (campaign of issue 36, branch lt36),
none shown to trainmesh before: each runs under Lightning 2.6 and under its port
(tests/helpers/programs.py) and is compared as data: the trained weights bit for bit, the metric
dictionaries, metrics.csv, the files left, checkpoint contents and the hooks called. Tiny models,
a few steps each.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

from helpers.batch_count_program import reading_batch_counts
from helpers.differential import recorder_class
from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


SHARED_CHECKPOINT_KEYS = ("state_dict", "optimizer_states", "lr_schedulers", "callbacks", "epoch", "global_step")
SHARED_CHECKPOINT_KEYS += ("hyper_parameters", "hparams_name")
# What Lightning 2.6's ModelCheckpoint keeps in a checkpoint (trainmesh's keeps "mode" and
# "last_global_step_saved" besides, for its resume)
CHECKPOINT_STATE = ("monitor", "best_model_score", "best_model_path", "current_score", "dirpath", "best_k_models")
CHECKPOINT_STATE += ("kth_best_model_path", "kth_value", "last_model_path")


def _relative(value, root):
    """Paths under the program's folder as relative ones (the two runs write to different folders)."""
    if isinstance(value, dict):
        return {_relative(k, root): _relative(v, root) for k, v in value.items()}
    return os.path.relpath(value, root) if isinstance(value, str) and value.startswith(str(root)) else value


def _data(n: int, features: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    return x, (x.sum(1, keepdim=True) > 0).float()


class _Classifier(nn.Module):
    def __init__(self, features: int = 4, hidden: int = 8, norm: bool = False):
        super().__init__()
        layers = [nn.Linear(features, hidden)] + ([nn.BatchNorm1d(hidden)] if norm else []) + [nn.ReLU()]
        self.body, self.head = nn.Sequential(*layers), nn.Linear(hidden, 1)

    def forward(self, x):
        return self.head(self.body(x))


def datamodule_with_stages(L, root):
    """A LightningDataModule: prepare_data writes the data set to disk, setup(stage) loads it and
    splits it per stage, a dict batch taken to the device by the DataModule's
    transfer_batch_to_device; fit, then validate and test with the DataModule alone."""

    class Files(L.pl.LightningDataModule):
        def __init__(self, data_dir, batch_size: int = 4):
            super().__init__()
            self.save_hyperparameters()
            self.calls = []

        def prepare_data(self):
            self.calls.append("prepare_data")
            os.makedirs(self.hparams.data_dir, exist_ok=True)
            torch.save(_data(30), os.path.join(self.hparams.data_dir, "data.pt"))

        def setup(self, stage):
            self.calls.append(("setup", stage))
            x, y = torch.load(os.path.join(self.hparams.data_dir, "data.pt"))
            full = [{"x": a, "y": b} for a, b in zip(x, y)]
            if stage in ("fit", "validate"):
                self.train_set, self.val_set = random_split(full[:24], [16, 8], torch.Generator().manual_seed(1))
            if stage == "test":
                self.test_set = full[24:]

        def train_dataloader(self):
            return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

        def val_dataloader(self):
            return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

        def test_dataloader(self):
            return DataLoader(self.test_set, batch_size=self.hparams.batch_size)

        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            self.calls.append(("transfer", self.trainer.state.stage.value, dataloader_idx, sorted(batch)))
            return {key: value.to(device) for key, value in batch.items()}

        def teardown(self, stage):
            self.calls.append(("teardown", stage))

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _Classifier()

        def _loss(self, batch):
            return F.binary_cross_entropy_with_logits(self.net(batch["x"]), batch["y"])

        def training_step(self, batch, batch_idx):
            loss = self._loss(batch)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self._loss(batch))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", self._loss(batch))

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.05)

    calls = []
    data, model = Files(root / "data"), Model()
    # A checkpoint callback of its own, monitoring val_loss
    callbacks = [recorder_class(L.pl.Callback, calls)(), L.callbacks.ModelCheckpoint(monitor="val_loss")]
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=2, logger=L.loggers.CSVLogger(root), callbacks=callbacks, log_every_n_steps=2)
    )
    trainer.fit(model, datamodule=data)
    fit = outcome(trainer, model, root, calls=calls, data_calls=list(data.calls))
    validated = trainer.validate(model, datamodule=data)
    tested = trainer.test(model, datamodule=data)
    return fit, validated, tested, data.calls, outcome(trainer, model, root), calls


def swa_after_cosine(L, root):
    """StochasticWeightAveraging over the last epochs, a cosine schedule before it, the learning
    rates logged by epoch. (With batch norm in the model trainmesh refuses SWA before training:
    Lightning recomputes the statistics in an extra epoch trainmesh's loop does not run yet.)"""

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _Classifier()

        def training_step(self, batch, batch_idx):
            loss = F.binary_cross_entropy_with_logits(self.net(batch[0]), batch[1])
            self.log("train_loss", loss, on_step=False, on_epoch=True)
            return loss

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
            return [optimizer], [torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=5)]

    swa = L.callbacks.StochasticWeightAveraging(swa_lrs=0.02, swa_epoch_start=2, annealing_epochs=1)
    monitor = L.callbacks.LearningRateMonitor(logging_interval="epoch")
    model = Model()
    logger = L.loggers.CSVLogger(root, name="swa")
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=4, callbacks=[swa, monitor], logger=logger, enable_checkpointing=False)
    )
    trainer.fit(model, DataLoader(TensorDataset(*_data(24)), batch_size=8, shuffle=True))
    averaged = {k: v.clone() for k, v in swa._average_model.state_dict().items()} if swa._average_model else {}
    return outcome(trainer, model, root, averaged=averaged, lr=trainer.optimizers[0].param_groups[0]["lr"])


def accumulation_with_step_schedule(L, root):
    """accumulate_grad_batches=3 with a scheduler stepping every 2 optimizer steps ("step",
    frequency 2), LearningRateMonitor by step with momentum, a CSVLogger at every step."""

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self.net(batch[0]), batch[1])
            self.log("loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.5)
            step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": step, "interval": "step", "frequency": 2}}

    monitor = L.callbacks.LearningRateMonitor(logging_interval="step", log_momentum=True)
    model = Model()
    kwargs = dict(max_epochs=2, accumulate_grad_batches=3, log_every_n_steps=1, enable_checkpointing=False)
    trainer = L.pl.Trainer(**trainer_kwargs(root, callbacks=[monitor], logger=L.loggers.CSVLogger(root), **kwargs))
    trainer.fit(model, DataLoader(TensorDataset(*_data(28)), batch_size=2))
    return outcome(trainer, model, root, lr=trainer.lr_scheduler_configs[0].scheduler.get_last_lr())


def checkpoint_by_steps_then_load_and_test(L, root):
    """ModelCheckpoint(every_n_train_steps=3, save_last=True, save_top_k=-1), then
    load_from_checkpoint of last.ckpt and a test in a new Trainer."""

    class Model(L.pl.LightningModule):
        def __init__(self, hidden: int = 6, lr: float = 0.05):
            super().__init__()
            self.save_hyperparameters()
            self.net = _Classifier(hidden=hidden)

        def training_step(self, batch, batch_idx):
            loss = F.binary_cross_entropy_with_logits(self.net(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def test_step(self, batch, batch_idx):
            logits = self.net(batch[0])
            self.log("test_acc", ((logits > 0).float() == batch[1]).float().mean())

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    checkpoint = L.callbacks.ModelCheckpoint(
        dirpath=root / "ckpt", every_n_train_steps=3, save_last=True, save_top_k=-1, filename="{epoch}-{step}"
    )
    model = Model(hidden=5)
    train = DataLoader(TensorDataset(*_data(20)), batch_size=4)
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=2, callbacks=[checkpoint], logger=False))
    trainer.fit(model, train)
    saved = torch.load(checkpoint.last_model_path, weights_only=False)
    shown = {  # the keys both write (trainmesh's own format otherwise: a documented difference)
        "keys": sorted(k for k in saved if k in SHARED_CHECKPOINT_KEYS),
        "global_step": saved["global_step"],
        "epoch": saved["epoch"],
        "hyper_parameters": dict(saved["hyper_parameters"]),
        "state_dict": saved["state_dict"],
        "callbacks": list(saved["callbacks"]),
        "state": {
            k: _relative(v, root) for k, v in saved["callbacks"][checkpoint.state_key].items() if k in CHECKPOINT_STATE
        },
    }
    loaded = Model.load_from_checkpoint(checkpoint.last_model_path)
    tester = L.pl.Trainer(**trainer_kwargs(root / "test", logger=False))
    tested = tester.test(loaded, DataLoader(TensorDataset(*_data(12, seed=5)), batch_size=4))
    fit = outcome(trainer, model, root, last=os.path.basename(checkpoint.last_model_path))
    return fit, shown, tested, dict(loaded.hparams)


def fractional_validation_and_predict(L, root):
    """val_check_interval=0.5 with limit_val_batches=2 and limit_train_batches=6, clipping by value,
    a callback reading callback_metrics in on_train_epoch_end, then predict with and without
    return_predictions."""

    class Reader(L.pl.Callback):
        def __init__(self):
            self.seen = []

        def on_train_epoch_end(self, trainer, pl_module):
            self.seen.append({k: float(v) for k, v in sorted(trainer.callback_metrics.items())})
            self.seen.append((trainer.val_check_batch, trainer.num_training_batches, trainer.global_step))

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _Classifier()

        def training_step(self, batch, batch_idx):
            loss = F.binary_cross_entropy_with_logits(self.net(batch[0]), batch[1])
            self.log("train_loss", loss, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.binary_cross_entropy_with_logits(self.net(batch[0]), batch[1]), prog_bar=True)

        def predict_step(self, batch, batch_idx):
            return torch.sigmoid(self.net(batch[0]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    reader, model = Reader(), Model()
    kwargs = dict(val_check_interval=0.5, limit_val_batches=2, limit_train_batches=6, max_epochs=2)
    kwargs.update(gradient_clip_val=0.05, gradient_clip_algorithm="value", log_every_n_steps=2)
    trainer = L.pl.Trainer(
        **trainer_kwargs(
            root, callbacks=[reader], logger=L.loggers.CSVLogger(root), enable_checkpointing=False, **kwargs
        )
    )
    x, y = _data(40)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=4), DataLoader(TensorDataset(x, y), batch_size=5))
    fit = outcome(trainer, model, root, seen=reader.seen)
    loader = DataLoader(TensorDataset(x[:7]), batch_size=3)
    predictions = trainer.predict(model, loader)
    nothing = trainer.predict(model, loader, return_predictions=False)
    return fit, predictions, nothing, outcome(trainer, model, root)


def early_stopping_on_train_metric(L, root):
    """EarlyStopping on an epoch-level training metric checked at the train epoch's end, a
    MultiStepLR, a module reading callback_metrics in its own on_train_epoch_end, then validate."""

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)
            self.history = []

        def training_step(self, batch, batch_idx):
            loss = F.mse_loss(self.net(batch[0]), batch[1])
            self.log("train_mse", loss, on_step=True, on_epoch=True)
            return loss

        def on_train_epoch_end(self):
            self.history.append((self.current_epoch, float(self.trainer.callback_metrics["train_mse_epoch"])))
            self.log("epoch_marker", float(self.current_epoch))

        def validation_step(self, batch, batch_idx):
            self.log("val_mse", F.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self):
            optimizer = torch.optim.Adam(self.parameters(), lr=0.3)
            return [optimizer], [torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2, 4], gamma=0.1)]

    g = torch.Generator().manual_seed(2)
    x = torch.randn(24, 4, generator=g)
    data = TensorDataset(x, x @ torch.ones(4, 1) + 0.5 * torch.randn(24, 1, generator=g))
    early = L.callbacks.EarlyStopping(
        monitor="train_mse_epoch", patience=1, min_delta=0.05, check_on_train_epoch_end=True
    )
    model = Model()
    trainer = L.pl.Trainer(
        **trainer_kwargs(
            root, max_epochs=12, callbacks=[early], logger=L.loggers.CSVLogger(root), enable_checkpointing=False
        )
    )
    trainer.fit(model, DataLoader(data, batch_size=6, shuffle=True))
    fit = outcome(trainer, model, root, stopped=early.stopped_epoch, history=model.history, wait=early.wait_count)
    return fit, trainer.validate(model, DataLoader(data, batch_size=12)), outcome(trainer, model, root)


@pytest.mark.parametrize(
    "program",
    [
        datamodule_with_stages,
        swa_after_cosine,
        accumulation_with_step_schedule,
        checkpoint_by_steps_then_load_and_test,
        fractional_validation_and_predict,
        early_stopping_on_train_metric,
    ],
)
def test_program_same_outcome(tmp_path, program):
    found = run_both(program, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []


def test_batch_counts_are_lightning_s_lists(tmp_path):
    """Found by fractional_validation_and_predict (docs/notes/lt36.md): Lightning 2.6 gives [3]
    where trainmesh gave 3; now the same lists at every hook and between the runs."""
    found = run_both(reading_batch_counts, tmp_path)
    seen = dict(found["lightning"])
    assert seen["after fit"]["num_val_batches"] == [2, 1] and seen["after validate"]["num_val_batches"] == [2]
    assert seen["after test"]["num_test_batches"] == [3] and seen["after predict"]["num_predict_batches"] == [3, 2]
    assert differences(found["lightning"], found["trainmesh"]) == []
