"""Users' pytorch-lightning 1.x programs of the l-progs15 campaign, cut down to what trainmesh ran
differently from pytorch-lightning 1.9.5, as data: ``measure("pytorch_lightning")`` is recorded under
1.9.5 by ``record_lightning_1_9_later_programs.py`` (its own venv) and compared with
``measure("trainmesh")`` by ``tests/tuner/test_tuning_lightning1_metrics.py``.
"""

import importlib
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def _numpy_inf() -> None:
    """1.9.5's ModelCheckpoint reads ``np.Inf``, which NumPy 2 removed."""
    import numpy

    if "Inf" not in dir(numpy):
        numpy.Inf = numpy.inf


def _numbers(metrics: dict) -> dict:
    return {name: round(float(value), 6) for name, value in sorted(metrics.items())}


def metrics_after_tune(pl, *, search: str) -> dict:
    """``trainer.tune`` then reading the trainer's metrics (an RL policy network's learning-rate search,
    stored file 12793810459, reads ``trainer.tune(...)["lr_find"]``): 1.9.5's searches are fits of their
    own, so what the last one logged stays in ``callback_metrics`` / ``logged_metrics`` until the next run."""

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)
            self.lr = 0.01
            self.batch_size = 2

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch).pow(2).mean()
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

        def train_dataloader(self):
            return DataLoader(
                torch.randn(32, 3, generator=torch.Generator().manual_seed(1)), batch_size=self.batch_size
            )

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        lr_find = search == "lr_find"
        trainer = pl.Trainer(
            max_epochs=2, default_root_dir=root, auto_lr_find=lr_find, auto_scale_batch_size=not lr_find, **QUIET
        )
        kwargs = {"lr_find_kwargs": {"num_training": 6}} if lr_find else {"scale_batch_size_kwargs": {"max_trials": 2}}
        trainer.tune(Regressor(), **kwargs)
        return {"callback": _numbers(trainer.callback_metrics), "logged": _numbers(trainer.logged_metrics)}


def _nested(metrics: dict) -> dict:
    return {
        name: {key: round(float(each), 6) for key, each in value.items()} if isinstance(value, dict) else repr(value)
        for name, value in metrics.items()
    }


def nested_metric(pl, *, where: str) -> dict:
    """``self.log("training", {"train_loss": loss, "n": 2.0}, on_step=True, on_epoch=True, prog_bar=True)`` from a
    1.x module (it defines ``training_step_end``; a CVAE's, stored file 31228586618, logs its loss so there), and
    ``self.log("val", {"loss": loss}, prog_bar=True)`` in ``validation_step``: 1.9.5 logs each dict as one nested
    metric (``training``, ``training_step``, ``training_epoch`` each a dict of the keys' values), and its CSVLogger
    writes the dict of floats into one cell."""
    import csv

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            loss = nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            if where == "training_step":
                self.log("training", {"train_loss": loss, "n": 2.0}, on_step=True, on_epoch=True, prog_bar=True)
            return {"loss": loss}

        def training_step_end(self, out):
            if where == "training_step_end":
                options = {"on_step": True, "on_epoch": True, "prog_bar": True, "sync_dist": True}
                self.log("training", {"train_loss": out["loss"], "n": 2.0}, **options)
            return out

        def validation_step(self, batch, batch_idx):
            self.log("val", {"loss": nn.functional.mse_loss(self.layer(batch[0]), batch[1])}, prog_bar=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.randn(8, 1))
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            max_epochs=2,
            default_root_dir=root,
            logger=pl.loggers.CSVLogger(root),
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            log_every_n_steps=1,
        )
        trainer.fit(Regressor(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
        trainer.logger.save()
        with open(f"{trainer.logger.log_dir}/metrics.csv") as rows:
            csv_rows = [{name: cell for name, cell in row.items() if cell} for row in csv.DictReader(rows)]
        return {
            "callback": _nested(trainer.callback_metrics),
            "logged": _nested(trainer.logged_metrics),
            "progress_bar": _nested(trainer.progress_bar_metrics),
            "csv_rows": csv_rows,
        }


def nested_metric_results(pl) -> dict:
    """A 1.x module's nested metrics in what ``trainer.validate`` / ``test`` return (1.9.5: a dict of tensors
    under the name), and the exception type an EarlyStopping or ModelCheckpoint monitoring one raises (1.9.5's
    comparisons fail on the dict: AttributeError, TypeError)."""

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def training_step_end(self, loss):
            self.log("training", {"a": loss}, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val", {"loss": nn.functional.mse_loss(self.layer(batch[0]), batch[1])}, prog_bar=True)

        def test_step(self, batch, batch_idx):
            self.log("tst", {"loss": nn.functional.mse_loss(self.layer(batch[0]), batch[1])}, on_step=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def results(returned: list) -> list:
        return [{name: {k: repr(v) for k, v in value.items()} for name, value in each.items()} for each in returned]

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.randn(8, 1))
    loader = DataLoader(data, batch_size=4)
    module = Regressor()
    measured = {}
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(max_epochs=2, default_root_dir=root, enable_checkpointing=False, **QUIET)
        measured["validate"] = results(trainer.validate(module, loader, verbose=False))
        measured["test"] = results(trainer.test(module, loader, verbose=False))
        for callback in (
            pl.callbacks.EarlyStopping("val"),
            pl.callbacks.ModelCheckpoint(dirpath=root, monitor="training_epoch"),
        ):
            options = {**QUIET, "enable_checkpointing": isinstance(callback, pl.callbacks.ModelCheckpoint)}
            trainer = pl.Trainer(max_epochs=2, default_root_dir=root, callbacks=[callback], **options)
            try:
                trainer.fit(module, loader, loader)
                measured[type(callback).__name__] = "trains"
            except Exception as error:
                measured[type(callback).__name__] = type(error).__name__
    return measured


def training_epoch_end_returning(pl) -> dict:
    """A 0.x-style ``training_epoch_end`` returning ``{"log": ...}`` (scout-l1 q05): 1.9.5 stops at the first
    epoch's end with a MisconfigurationException; what was trained and the error's type and words."""

    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return {"loss": nn.functional.mse_loss(self.layer(batch[0]), batch[1])}

        def training_epoch_end(self, outputs):
            return {"log": {"train_loss": torch.stack([o["loss"] for o in outputs]).mean()}}

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    loader = DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4)
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(max_epochs=3, default_root_dir=root, enable_checkpointing=False, **QUIET)
        try:
            trainer.fit(Classifier(), loader)
            return {"outcome": "trains", "global_step": trainer.global_step}
        except Exception as error:
            return {"outcome": type(error).__name__, "words": str(error), "global_step": trainer.global_step}


def measure(root: str) -> dict:
    _numpy_inf()
    pl = importlib.import_module(root)
    return {
        "metrics_after_lr_find": metrics_after_tune(pl, search="lr_find"),
        "metrics_after_scale_batch_size": metrics_after_tune(pl, search="scale_batch_size"),
        "nested_metric_in_training_step": nested_metric(pl, where="training_step"),
        "nested_metric_in_training_step_end": nested_metric(pl, where="training_step_end"),
        "nested_metric_results": nested_metric_results(pl),
        "training_epoch_end_returning": training_epoch_end_returning(pl),
    }
