"""Small pytorch-lightning 1.x programs (l1-progs19): what ``trainer.callbacks`` holds (1.9.5 lists a
``GradientAccumulationScheduler`` in every Trainer), the factor callbacks read at an epoch's start, and the
``hparams.yaml`` a ``CSVLogger`` holds after ``trainer.tune``. ``measure("pytorch_lightning")`` is recorded
under 1.9.5 by ``record_lightning_1_9_callback_lists.py`` (its own venv) into
``lightning_1_9_callback_lists.json``; ``tests/trainer/lightning1/test_accumulation.py`` runs the same
programs under trainmesh and compares.
"""

import glob
import importlib
import os
import tempfile

import torch
import yaml
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "logger": False}


def _data(n=24, batch_size=4):
    generator = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(n, 4, generator=generator), torch.randn(n, 1, generator=generator)), batch_size
    )


def _module(pl, *, manual=False, lightning1=True, hyperparameters=True):
    class Module(pl.LightningModule):
        def __init__(self, lr=0.1, batch_size=4):
            super().__init__()
            if hyperparameters:
                self.save_hyperparameters()
            self.lr, self.batch_size = lr, batch_size
            self.layer = nn.Linear(4, 1)
            self.automatic_optimization = not manual

        def training_step(self, batch, batch_idx):
            loss = nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            if manual:
                optimizer = self.optimizers()
                optimizer.zero_grad()
                self.manual_backward(loss)
                optimizer.step()
            return loss

        def train_dataloader(self):
            return _data(batch_size=self.batch_size)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    if lightning1:  # a hook 2.0 removed: a 1.x module
        Module.training_epoch_end = lambda self, outputs: None
    return Module()


def _listed(trainer, scheduler_class) -> dict:
    scheduler = trainer.accumulation_scheduler
    return {
        "callbacks": [type(cb).__name__ for cb in trainer.callbacks],
        "factor": trainer.accumulate_grad_batches,
        "scheduling": sorted([epoch, factor] for epoch, factor in scheduler.scheduling.items()),
        "listed": any(cb is scheduler for cb in trainer.callbacks),
        "is_class": type(scheduler) is scheduler_class,
    }


def callback_lists(pl) -> dict:
    """``trainer.callbacks`` of 1.x-spelled Trainers (int / dict accumulation, a program's callbacks, a
    program's scheduler, from_argparse_args) and of a plain one before and after fitting a 1.x module."""
    import argparse

    callbacks = pl.callbacks
    scheduler_class = callbacks.GradientAccumulationScheduler
    common = dict(max_epochs=1, enable_progress_bar=False, logger=False)
    found = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, settings in {
            "gpus0": {},
            "int": {"accumulate_grad_batches": 2},
            "dict": {"accumulate_grad_batches": {1: 2}},
            "given": {"callbacks": [callbacks.LearningRateMonitor(), callbacks.ModelCheckpoint(dirpath=folder)]},
            "own_scheduler": {"callbacks": [callbacks.Callback(), scheduler_class({0: 1, 1: 3})]},
            "no_checkpoint": {"enable_checkpointing": False, "enable_model_summary": False},
        }.items():
            trainer = pl.Trainer(gpus=0, default_root_dir=folder, **common, **settings)
            found[name] = _listed(trainer, scheduler_class)
        parser = pl.Trainer.add_argparse_args(argparse.ArgumentParser())
        arguments = parser.parse_args(["--accumulate_grad_batches", "3"])
        found["argparse"] = _listed(
            pl.Trainer.from_argparse_args(arguments, default_root_dir=folder, **common), scheduler_class
        )
        trainer = pl.Trainer(default_root_dir=folder, **common)  # spelled as 2.x: a 1.x module's fit lists one
        trainer.fit(_module(pl))
        found["lightning1_module_fit"] = _listed(trainer, scheduler_class)
    return found


def epoch_factors(pl) -> dict:
    """``accumulate_grad_batches={0: 2, 2: 3}``: the factor a program's callback reads at each epoch's start
    (1.9.5's fit loop applies the scheduler before the callbacks' hooks), the steps and the weights."""
    seen = []

    class Factors(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            seen.append(trainer.accumulate_grad_batches)

    pl.seed_everything(0)
    trainer = pl.Trainer(
        max_epochs=3, accumulate_grad_batches={0: 2, 2: 3}, callbacks=[Factors()], enable_checkpointing=False, **QUIET
    )
    before = trainer.accumulate_grad_batches
    model = _module(pl)
    trainer.fit(model)
    weights = [round(float(v), 7) for v in torch.cat([p.detach().flatten() for p in model.parameters()])]
    return {"before": before, "seen": seen, "global_step": trainer.global_step, "weights": weights}


def manual_with_listed_scheduler(pl) -> dict:
    """A 1.x manual-optimization module under a 1.x Trainer: the scheduler 1.9.5 lists refuses nothing."""
    pl.seed_everything(0)
    trainer = pl.Trainer(gpus=0, max_epochs=1, enable_checkpointing=False, **QUIET)
    model = _module(pl, manual=True)
    trainer.fit(model)
    return {"global_step": trainer.global_step, "weight": round(float(model.layer.weight.sum()), 6)}


def hparams_after_tune(pl) -> dict:
    """The ``hparams.yaml`` of a CSVLogger after ``trainer.tune`` (auto_scale_batch_size changes
    ``hparams.batch_size``) and after the fit: its values, read back."""
    pl.seed_everything(0)
    with tempfile.TemporaryDirectory() as folder:
        logger = pl.loggers.CSVLogger(folder)
        trainer = pl.Trainer(
            max_epochs=1,
            auto_scale_batch_size=True,
            logger=logger,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        model = _module(pl)
        trainer.tune(model, scale_batch_size_kwargs={"max_trials": 2, "steps_per_trial": 1})
        found = {"batch_size": [model.batch_size, model.hparams.batch_size], "after_tune": _yaml_files(folder)}
        trainer.fit(model)
        found["after_fit"] = _yaml_files(folder)
    return found


def csv_files_without_hparams(pl, *, lightning1=True) -> dict:
    """A CSVLogger's version folder after fitting a module that saved no hyperparameters: 1.9.5's writer
    saves ``hparams.yaml`` (``{}``) at every save."""
    pl.seed_everything(0)
    with tempfile.TemporaryDirectory() as folder:
        trainer = pl.Trainer(
            max_epochs=1,
            logger=pl.loggers.CSVLogger(folder),
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        model = _module(pl, lightning1=lightning1, hyperparameters=False)
        trainer.fit(model)
        return _yaml_files(folder)


def _yaml_files(folder) -> dict:
    found = {}
    for path in sorted(glob.glob(os.path.join(folder, "**", "hparams.yaml"), recursive=True)):
        with open(path) as handle:
            found[os.path.relpath(path, folder)] = yaml.safe_load(handle)
    return found


def measure(root: str) -> dict:
    import numpy

    if "Inf" not in dir(numpy):  # 1.9.5's ModelCheckpoint reads ``np.Inf``, which NumPy 2 removed
        numpy.Inf = numpy.inf
    pl = importlib.import_module(root)
    return {
        "callback_lists": callback_lists(pl),
        "epoch_factors": epoch_factors(pl),
        "manual_with_listed_scheduler": manual_with_listed_scheduler(pl),
        "hparams_after_tune": hparams_after_tune(pl),
        "csv_files_without_hparams": csv_files_without_hparams(pl),
    }
