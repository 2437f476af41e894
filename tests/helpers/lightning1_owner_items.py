"""Small pytorch-lightning 1.x programs (the owner-small7 items), as data: ``measure("pytorch_lightning")``
is recorded under 1.9.5 by ``record_lightning_1_9_owner_items.py`` (its own venv) into
``lightning_1_9_owner_items.json``; the tests beside each fix run the same function under trainmesh and
compare (``tests/callbacks/test_lr_monitor_lightning1.py``, ``tests/loggers/test_csv_logger_lightning1.py``,
``tests/callbacks/test_lightning1_names_bar.py``, ``tests/trainer/test_checkpointing_lightning1.py``,
``tests/trainer/lightning1/test_tuner.py``, ``tests/trainer/test_stage_setup_lightning1.py``).
Each module defines ``training_epoch_end`` (a hook 2.0 removed), which makes it a 1.x module.
"""

import csv
import importlib
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

QUIET = {"enable_progress_bar": False, "enable_model_summary": False}


def _module(pl, *, log_order=("zeta", "alpha"), calls=None):
    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.calls = calls
            self.layer = nn.Linear(4, 1)
            self.lr = 0.1
            self.learning_rate = 0.1

        def training_step(self, batch, batch_idx):
            loss = nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            for name in log_order:
                self.log(name, loss)
            return loss

        def training_epoch_end(self, outputs):
            self.log("mid", 1.0)

        def setup(self, stage=None):
            if self.calls is not None:
                self.calls.append(["module.setup", str(stage)])

        def teardown(self, stage=None):
            if self.calls is not None:
                self.calls.append(["module.teardown", str(stage)])

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=self.batch_size)

        def forward(self, x):
            return self.layer(x)

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

        def test_step(self, batch, batch_idx):
            self.log("test_loss", nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self.layer(batch[0])

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 1)]

    return Module()


def _data(n=16):
    torch.manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 4), torch.randn(n, 1)), batch_size=4)


def lr_monitor_metrics(pl) -> dict:
    """Item 2: 1.9.5's LearningRateMonitor logs its rates but leaves callback_metrics alone."""
    from importlib import import_module

    callbacks = import_module(f"{pl.__name__}.callbacks")
    loggers = import_module(f"{pl.__name__}.loggers")
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            max_epochs=2,
            default_root_dir=root,
            logger=loggers.CSVLogger(root),
            log_every_n_steps=1,
            callbacks=[callbacks.LearningRateMonitor()],
            enable_checkpointing=False,
            limit_val_batches=0,
            **QUIET,
        )
        trainer.fit(_module(pl), _data())
        return {"callback_metrics": sorted(trainer.callback_metrics)}


def csv_columns(pl) -> dict:
    """Item 6: 1.9.5's CSVLogger writes its columns in the order the names first appear."""
    from importlib import import_module

    loggers = import_module(f"{pl.__name__}.loggers")
    with tempfile.TemporaryDirectory() as root:
        logger = loggers.CSVLogger(root)
        trainer = pl.Trainer(
            max_epochs=2,
            default_root_dir=root,
            logger=logger,
            log_every_n_steps=2,
            enable_checkpointing=False,
            **QUIET,
        )
        trainer.fit(_module(pl), _data(), _data(8))
        with open(os.path.join(logger.log_dir, "metrics.csv"), newline="") as file:
            return {"header": next(csv.reader(file))}


def weights_only_keys(pl) -> dict:
    """Item 3: the keys of a weights-only checkpoint (ModelCheckpoint's and ``save_checkpoint``'s)."""
    from importlib import import_module

    callbacks = import_module(f"{pl.__name__}.callbacks")
    with tempfile.TemporaryDirectory() as root:
        checkpoint = callbacks.ModelCheckpoint(dirpath=root, filename="mc", save_weights_only=True)
        trainer = pl.Trainer(max_epochs=1, default_root_dir=root, logger=False, callbacks=[checkpoint], **QUIET)
        trainer.fit(_module(pl), _data())
        trainer.save_checkpoint(os.path.join(root, "own.ckpt"), weights_only=True)
        keys = {}
        for name in ("mc", "own"):
            loaded = torch.load(os.path.join(root, f"{name}.ckpt"), weights_only=False)
            keys[name] = sorted(key for key in loaded if key != "pytorch-lightning_version")
        return keys


def bar_members(pl) -> dict:
    """Item 5: 1.9's ``ProgressBarBase`` members a custom bar reads (its docs' LitProgressBar prints
    ``self.train_batch_idx / self.total_train_batches``)."""
    from importlib import import_module

    callbacks = import_module(f"{pl.__name__}.callbacks")
    seen = []

    class Bar(callbacks.ProgressBarBase):
        def __init__(self):
            super().__init__()
            self.enabled = True

        def disable(self):
            self.enabled = False

        def _note(self, hook, *names):
            seen.append([hook, *(getattr(self, name) for name in names)])

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            self._note("train", "train_batch_idx", "total_train_batches", "total_batches_current_epoch")

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            super().on_validation_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)
            self._note("val", "val_batch_idx")

        def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            super().on_test_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)
            self._note("test", "test_batch_idx")

        def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            super().on_predict_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)
            self._note("predict", "predict_batch_idx")

    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            max_epochs=2,
            default_root_dir=root,
            logger=False,
            enable_checkpointing=False,
            callbacks=[Bar()],
            enable_model_summary=False,
            num_sanity_val_steps=1,
            val_check_interval=2,
        )
        model = _module(pl)
        trainer.fit(model, _data(), _data(8))
        trainer.validate(model, _data(8))
        trainer.test(model, _data(8))
        trainer.predict(model, _data(8))
    return {"seen": seen}


def tune_setup_calls(pl, **finder) -> dict:
    """Item 9: the callbacks' ``setup``/``teardown`` calls around 1.9.5's ``trainer.tune``."""
    calls = []

    class Watch(pl.Callback):
        def setup(self, trainer, pl_module, stage=None):
            calls.append(["setup", str(stage)])

        def teardown(self, trainer, pl_module, stage=None):
            calls.append(["teardown", str(stage)])

        def on_fit_start(self, trainer, pl_module):
            calls.append(["on_fit_start"])

    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            max_epochs=1,
            default_root_dir=root,
            logger=False,
            enable_checkpointing=False,
            callbacks=[Watch()],
            **finder,
            **QUIET,
        )
        model = _module(pl, calls=calls)
        model.batch_size = 4
        trainer.tune(model, lr_find_kwargs={"num_training": 3}, scale_batch_size_kwargs={"max_trials": 2})
        calls.append(["tuned"])
        trainer.fit(model)
    return {"calls": calls}


def tune_bar_calls(pl) -> dict:
    """Item 4: ``enable()``/``disable()`` on the run's progress bar around 1.9.5's ``trainer.tune`` searches."""
    from importlib import import_module

    callbacks = import_module(f"{pl.__name__}.callbacks")
    calls = []

    class Bar(callbacks.ProgressBarBase):
        def disable(self):
            calls.append("disable")

        def enable(self):
            calls.append("enable")

    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            max_epochs=1,
            default_root_dir=root,
            logger=False,
            enable_checkpointing=False,
            callbacks=[Bar()],
            auto_lr_find=True,
            auto_scale_batch_size=True,
            enable_model_summary=False,
        )
        model = _module(pl)
        model.batch_size = 4
        trainer.tune(model, lr_find_kwargs={"num_training": 3}, scale_batch_size_kwargs={"max_trials": 2})
    return {"calls": calls}


def validate_enables_validation(pl) -> dict:
    """``trainer.enable_validation`` around ``trainer.validate(model, loader)`` of a module without
    ``val_dataloader``: 1.9.5's attach_dataloaders points the fit's validation at the loader given."""
    seen = []

    class Module(_module(pl).__class__):
        def validation_step(self, batch, batch_idx):
            self.log("v", 1.0)

        def validation_epoch_end(self, outputs):
            seen.append(["in", self.trainer.enable_validation])

    with tempfile.TemporaryDirectory() as folder:
        trainer = pl.Trainer(default_root_dir=folder, max_epochs=1, logger=False, enable_checkpointing=False, **QUIET)
        model = Module()
        seen.append(["before", trainer.enable_validation])
        for stage in ("validate", "fit", "validate"):
            getattr(trainer, stage)(model, _data(8))
            seen.append([stage, trainer.enable_validation])
    return {"seen": seen}


def measure(root: str) -> dict:
    import numpy

    if "Inf" not in dir(numpy):  # 1.9.5's ModelCheckpoint reads ``np.Inf``, which NumPy 2 removed
        numpy.Inf = numpy.inf
    pl = importlib.import_module(root)
    return {
        "lr_monitor_metrics": lr_monitor_metrics(pl),
        "csv_columns": csv_columns(pl),
        "weights_only_keys": weights_only_keys(pl),
        "bar_members": bar_members(pl),
        "tune_bar": tune_bar_calls(pl),
        "tune_setup_lr": tune_setup_calls(pl, auto_lr_find=True),
        "tune_setup_both": tune_setup_calls(pl, auto_lr_find=True, auto_scale_batch_size=True),
        "validate_enables_validation": validate_enables_validation(pl),
    }
