"""The exception class of a Trainer or module misconfiguration, as Lightning 2.6 raises it: a program
catching ``MisconfigurationException`` catches trainmesh's error where it catches Lightning's (the
messages are trainmesh's own where they say more). Each case runs under Lightning and trainmesh."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.ones(8, 1))


def _loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.ones(8, 1)), batch_size=2)


def _classes(framework) -> tuple[type, type, type, type]:
    class Model(framework.LightningModule):
        def __init__(self, manual: bool = False, optimizers: str = "", log_in: str = "") -> None:
            super().__init__()
            self.log_in = log_in
            self.layer = torch.nn.Linear(1, 1)
            self.automatic_optimization = not manual
            self.choice = optimizers

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0] if isinstance(batch, list) else batch).sum()
            if not self.automatic_optimization:
                self.clip_gradients(self.optimizers(), gradient_clip_val=0.5, gradient_clip_algorithm="bogus")
            return loss

        def validation_step(self, batch, batch_idx): ...

        def predict_step(self, batch, batch_idx):
            if self.log_in == "predict_step":
                self.log("x", 1.0)
            return batch

        def on_fit_start(self) -> None:
            if self.log_in == "on_fit_start":
                self.log("x", 1.0)

        def on_train_end(self) -> None:
            if self.log_in == "on_train_end":
                self.log("x", 1.0)

        def test_step(self, batch, batch_idx): ...

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            step = torch.optim.lr_scheduler.StepLR(optimizer, 1)
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            return {
                "garbage": "not an optimizer",
                "interval": {"optimizer": optimizer, "lr_scheduler": {"scheduler": step, "interval": "bogus"}},
                "plateau": {"optimizer": optimizer, "lr_scheduler": plateau},
                "plateau_dict": {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau}},
            }.get(self.choice, optimizer)

    class NoStep(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class NoOptimizers(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

    class Data(framework.LightningDataModule):
        def train_dataloader(self):
            return _loader()

    return Model, NoStep, NoOptimizers, Data


def _cases(framework) -> dict:
    Model, NoStep, NoOptimizers, Data = _classes(framework)
    quiet = dict(logger=False, enable_checkpointing=False, enable_model_summary=False, accelerator="cpu")

    def trainer(**kwargs):
        return framework.Trainer(**{"enable_progress_bar": False, **quiet, **kwargs})

    def fit(model, loaders=None, **kwargs):
        return trainer(max_steps=1, **kwargs).fit(model, loaders if loaders is not None else _loader())

    def log_after_fit():  # no loop runs: Lightning's result collection is None
        model = Model()
        fit(model)
        model.log("x", 1.0)

    return {
        "fast_dev_run=-1": lambda: trainer(fast_dev_run=-1),
        "limit_train_batches=1.5": lambda: trainer(limit_train_batches=1.5),
        "overfit_batches=1.5": lambda: trainer(overfit_batches=1.5),
        "profiler=bogus": lambda: trainer(profiler="bogus"),
        "gradient_clip_algorithm=bogus": lambda: trainer(gradient_clip_algorithm="bogus"),
        "check_val_every_n_epoch=1.5": lambda: trainer(check_val_every_n_epoch=1.5),
        "a fraction with check_val_every_n_epoch=None": lambda: trainer(
            check_val_every_n_epoch=None, val_check_interval=0.5
        ),
        "reload_dataloaders_every_n_epochs=-1": lambda: trainer(reload_dataloaders_every_n_epochs=-1),
        "plugins=[object()]": lambda: trainer(plugins=[object()]),
        "ModelCheckpoint without checkpointing": lambda: framework.Trainer(
            **quiet, enable_progress_bar=False, callbacks=[framework.callbacks.ModelCheckpoint()]
        ),
        "a bar without the bar": lambda: trainer(callbacks=[framework.callbacks.TQDMProgressBar()]),
        "two bars": lambda: trainer(
            enable_progress_bar=True,
            callbacks=[framework.callbacks.TQDMProgressBar(), framework.callbacks.TQDMProgressBar()],
        ),
        "fit: loaders and datamodule": lambda: trainer(max_steps=1).fit(Model(), _loader(), datamodule=Data()),
        "validate: loaders and datamodule": lambda: trainer().validate(Model(), _loader(), datamodule=Data()),
        "test: loaders and datamodule": lambda: trainer().test(Model(), _loader(), datamodule=Data()),
        "predict: loaders and datamodule": lambda: trainer().predict(Model(), _loader(), datamodule=Data()),
        "no training_step": lambda: fit(NoStep()),
        "no configure_optimizers": lambda: fit(NoOptimizers()),
        "manual with gradient_clip_val": lambda: fit(Model(manual=True), gradient_clip_val=1.0),
        "manual with accumulate_grad_batches": lambda: fit(Model(manual=True), accumulate_grad_batches=2),
        "clip_gradients(gradient_clip_algorithm=bogus)": lambda: fit(Model(manual=True)),
        "configure_optimizers returns a string": lambda: fit(Model(optimizers="garbage")),
        "scheduler interval bogus": lambda: fit(Model(optimizers="interval")),
        "ReduceLROnPlateau without monitor": lambda: fit(Model(optimizers="plateau")),
        "ReduceLROnPlateau dict without monitor": lambda: fit(Model(optimizers="plateau_dict")),
        "an iterable stream with limit 0.5": lambda: fit(
            Model(), DataLoader(_Stream(), batch_size=2), limit_train_batches=0.5
        ),
        "self.log in predict_step": lambda: trainer().predict(Model(log_in="predict_step"), _loader()),
        "self.log in on_fit_start": lambda: fit(Model(log_in="on_fit_start")),
        "self.log in on_train_end": lambda: fit(Model(log_in="on_train_end")),
        "self.log after fit": log_after_fit,
        "limit_val_batches=0.01 of 4 batches": lambda: trainer(max_steps=1, limit_val_batches=0.01).fit(
            Model(), _loader(), _loader()
        ),
    }


def _caught(framework) -> dict[str, str]:
    from importlib import import_module

    misconfiguration = import_module(f"{framework.__name__}.utilities.exceptions").MisconfigurationException
    caught = {}
    for name, case in _cases(framework).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                case()
                caught[name] = "ran"
            except Exception as error:
                caught[name] = "MisconfigurationException" if isinstance(error, misconfiguration) else repr(error)
    return caught


def test_misconfigurations_raise_lightning_s_exception_class() -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _caught(lightning)
    assert set(expected.values()) == {"MisconfigurationException"}
    assert _caught(trainmesh) == expected
