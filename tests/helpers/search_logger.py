"""What a module sees of the run's logger while a tuner searches: ``self.logger`` (the run's CSVLogger, the
search's ``DummyLogger`` or None), ``self.logger.experiment`` (a dummy one?) and ``len(trainer.loggers)`` in
each hook, with the logger's ``log_hyperparams`` / ``log_metrics`` calls. ``measure("pytorch_lightning")`` is
recorded under 1.9.5 by ``record_lightning_1_9_search_logger.py`` (its own venv) into
``lightning_1_9_search_logger.json``; ``tests/tuner/test_search_logger.py`` runs the same programs under
trainmesh, and Lightning 2.6's beside them, and compares.

The hook order: the searches save their checkpoint before they swap the logger, and restore it after they
put it back, so ``setup``, ``configure_optimizers``, ``on_save_checkpoint`` and ``on_load_checkpoint``
(which run outside the swap) see the run's logger, and only the trials' hooks the ``DummyLogger``.
"""

import importlib
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def _kind(logger, user):
    if logger is None:
        return None
    return "run's" if logger is user else type(logger).__name__


def search_logger(pl, search: str, *, with_logger: bool = True) -> dict:
    """One ``search`` (``lr_find``, ``scale_batch_size``; ``auto_lr_find``, ``auto_scale_batch_size``: 1.x's
    ``trainer.tune``) then a fit of one epoch:
    ``seen`` rows ``[hook, self.logger, len(trainer.loggers), experiment is a dummy]`` (consecutive repeats
    once) from the search's start to the end of the fit, and the run's logger's calls."""
    loggers = importlib.import_module(f"{pl.__name__}.loggers")
    seen, calls = [], []

    class Recording(loggers.CSVLogger):
        def log_hyperparams(self, params, *args, **kwargs):
            calls.append("log_hyperparams")
            return super().log_hyperparams(params, *args, **kwargs)

        def log_metrics(self, metrics, step=None):
            calls.append("log_metrics")
            return super().log_metrics(metrics, step)

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)
            self.lr = 0.1
            self.batch_size = 4

        def note(self, hook):
            row = [hook, _kind(self.logger, user), len(self.trainer.loggers)]
            if self.logger is not None:  # as a 1.x program's hook: crashes on no logger
                experiment = self.logger.experiment
                row.append("Dummy" in type(experiment).__name__)
            if not seen or seen[-1] != row:
                seen.append(row)

        def setup(self, stage=None):
            self.note("setup")

        def configure_optimizers(self):
            self.note("configure_optimizers")
            return torch.optim.SGD(self.parameters(), lr=self.lr)

        def on_train_start(self):
            self.note("on_train_start")

        def training_step(self, batch, batch_idx):
            self.note("training_step")
            loss = nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            self.log("loss", loss)
            return loss

        def on_train_end(self):
            self.note("on_train_end")

        def on_save_checkpoint(self, checkpoint):
            self.note("on_save_checkpoint")

        def on_load_checkpoint(self, checkpoint):
            self.note("on_load_checkpoint")

        def train_dataloader(self):
            generator = torch.Generator().manual_seed(0)
            data = TensorDataset(torch.randn(32, 4, generator=generator), torch.randn(32, 1, generator=generator))
            return DataLoader(data, batch_size=self.batch_size)

    with tempfile.TemporaryDirectory() as root:
        user = Recording(root) if with_logger else None
        settings = {"default_root_dir": root, "max_epochs": 1, "logger": user if with_logger else False}
        settings |= {"enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
        settings |= {"log_every_n_steps": 1}
        model = Module()
        if search.startswith("auto_"):  # 1.x's trainer.tune
            trainer = pl.Trainer(**{search: True}, **settings)
            trainer.tune(model, lr_find_kwargs={"num_training": 4}, scale_batch_size_kwargs={"max_trials": 2})
        else:
            trainer = pl.Trainer(**settings)
            tuner = (
                trainer.tuner
                if pl.__name__ == "pytorch_lightning"
                else importlib.import_module(f"{pl.__name__}.tuner").Tuner(trainer)
            )
            if search == "lr_find":
                tuner.lr_find(model, num_training=4)
            else:
                tuner.scale_batch_size(model, max_trials=2, steps_per_trial=2)
        seen.append(["tuned", _kind(trainer.logger, user), len(trainer.loggers)])
        trainer.fit(model)
    return {"seen": seen, "calls": [[name, calls.count(name)] for name in ("log_hyperparams", "log_metrics")]}


def measure(pl_name: str) -> dict:
    """The 1.x searches under ``pl_name`` (1.9.5's recording): ``trainer.tuner.lr_find`` and ``trainer.tune``'s
    two, and ``trainer.tune``'s learning-rate search without a logger."""
    pl = importlib.import_module(pl_name)
    measured = {search: search_logger(pl, search) for search in ("lr_find", "auto_lr_find", "auto_scale_batch_size")}
    return measured | {"auto_lr_find_no_logger": search_logger(pl, "auto_lr_find", with_logger=False)}
