"""pytorch-lightning 1.x programs that tune (``trainer.tuner.scale_batch_size`` / ``lr_find`` and
``trainer.tune`` with ``auto_scale_batch_size`` / ``auto_lr_find``), as data: ``measure("pytorch_lightning")``
is recorded under 1.9.5 by ``record_lightning_1_9_tuner.py`` (its own venv) into ``lightning_1_9_tuner.json``;
``tests/tuner/test_tuner_lightning1.py`` runs the same functions under trainmesh and compares: the value
found, the finder's results and suggestion, the model's attribute, the Trainer's state after, the module's
hook calls, and the weights a fit trains after the tune. Each module defines ``training_epoch_end`` (a hook
2.0 removed), which makes it a 1.x module.
"""

import importlib
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

QUIET = {"enable_progress_bar": False, "enable_model_summary": False}
HOOKS = ("setup", "configure_optimizers", "on_fit_start", "on_fit_end", "on_train_start", "on_train_end")
HOOKS += ("on_save_checkpoint", "on_load_checkpoint", "teardown", "train_dataloader")


def _module(pl, calls):
    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 1)
            self.lr = 0.05
            self.batch_size = 8

        def _note(self, hook, *extra):
            calls.append([hook, *extra])

        def training_step(self, batch, batch_idx):
            return nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def training_epoch_end(self, outputs):
            pass

        def train_dataloader(self):
            self._note("train_dataloader", self.batch_size)
            generator = torch.Generator().manual_seed(3)
            data = TensorDataset(torch.randn(160, 4, generator=generator), torch.randn(160, 1, generator=generator))
            return DataLoader(data, batch_size=self.batch_size, shuffle=True)

        def configure_optimizers(self):
            self._note("configure_optimizers", self.lr)
            return torch.optim.SGD(self.parameters(), lr=self.lr)

        def setup(self, stage=None):
            self._note("setup")

        def teardown(self, stage=None):
            self._note("teardown")

        def on_fit_start(self):
            self._note("on_fit_start")

        def on_fit_end(self):
            self._note("on_fit_end")

        def on_train_start(self):
            self._note("on_train_start")

        def on_train_end(self):
            self._note("on_train_end")

        def on_save_checkpoint(self, checkpoint):
            self._note("on_save_checkpoint")

        def on_load_checkpoint(self, checkpoint):
            self._note("on_load_checkpoint")

    return Module()


def _weights(model) -> list:
    return [round(float(v), 7) for v in torch.cat([p.detach().flatten() for p in model.parameters()])]


def _state(trainer, model, root) -> dict:
    return {
        "global_step": trainer.global_step,
        "current_epoch": trainer.current_epoch,
        "loggers": [type(logger).__name__ for logger in trainer.loggers],
        # (1.9.5 lists a GradientAccumulationScheduler of its own among every Trainer's callbacks: not the tuner's)
        "callbacks": sorted(type(cb).__name__ for cb in trainer.callbacks if "Accumulation" not in type(cb).__name__),
        "lr": model.lr,
        "batch_size": model.batch_size,
        "files": sorted(os.listdir(root)),
    }


def _trainer(pl, root, **kwargs):
    loggers = importlib.import_module(f"{pl.__name__}.loggers")
    return pl.Trainer(
        max_epochs=kwargs.pop("max_epochs", 1),
        default_root_dir=root,
        logger=loggers.CSVLogger(root),
        enable_checkpointing=False,
        **QUIET,
        **kwargs,
    )


def scale_batch_size(pl, **kwargs) -> dict:
    """``trainer.tuner.scale_batch_size(model, **kwargs)``: the size found, the hooks, the state after."""
    calls: list = []
    pl.seed_everything(0)
    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(pl, root)
        model = _module(pl, calls)
        found = trainer.tuner.scale_batch_size(model, **kwargs)
        return {"found": found, "calls": calls, "state": _state(trainer, model, root), "weights": _weights(model)}


def lr_find(pl, **kwargs) -> dict:
    """``trainer.tuner.lr_find(model, **kwargs)``: the finder's results and suggestion, the hooks, the state."""
    calls: list = []
    pl.seed_everything(0)
    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(pl, root)
        model = _module(pl, calls)
        finder = trainer.tuner.lr_find(model, **kwargs)
        return {
            "lr": [round(v, 9) for v in finder.results["lr"]],
            "loss": [round(v, 6) for v in finder.results["loss"]],
            "suggestion": finder.suggestion(),
            "calls": calls,
            "state": _state(trainer, model, root),
            "weights": _weights(model),
        }


def tune_then_fit(pl, **finders) -> dict:
    """``trainer.tune(model)`` with ``finders`` (``auto_lr_find`` / ``auto_scale_batch_size``), then a fit:
    the hooks of each, what the tune found, and the trained weights."""
    calls: list = []
    pl.seed_everything(0)
    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(pl, root, **finders)
        model = _module(pl, calls)
        result = trainer.tune(model, lr_find_kwargs={"num_training": 18}, scale_batch_size_kwargs={"max_trials": 2})
        calls.append(["tuned"])
        tuned = _state(trainer, model, root)
        trainer.fit(model)
        return {
            "result": sorted(result),
            "calls": calls,
            "tuned": tuned,
            # (what a fit's CSVLogger writes is not the tuner's: 1.9.5's writes hparams.yaml, trainmesh's nothing)
            "fitted": {k: v for k, v in _state(trainer, model, root).items() if k != "files"},
            "weights": _weights(model),
        }


def tuner_built(pl) -> dict:
    """A program's own ``Tuner(trainer)`` (1.x's ``pytorch_lightning.tuner.tuning.Tuner``) on a Trainer spelled
    for 1.x (``gpus=0``): ``scale_batch_size(max_trials=2)``, then ``lr_find`` with its default ``update_attr``."""
    calls: list = []
    pl.seed_everything(0)
    tuner_class = importlib.import_module(f"{pl.__name__}.tuner.tuning").Tuner
    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(pl, root, gpus=0)
        model = _module(pl, calls)
        tuner = tuner_class(trainer)
        found = tuner.scale_batch_size(model, max_trials=2)
        finder = tuner.lr_find(model, num_training=18)
        return {
            "found": found,
            "suggestion": finder.suggestion(),
            "state": _state(trainer, model, root),
            "weights": _weights(model),
        }


def finder_callbacks(pl) -> dict:
    """``BatchSizeFinder`` and ``LearningRateFinder`` (its default ``update_attr``) as callbacks of a Trainer
    spelled for 1.x (``gpus=0``), then the fit: the sizes and rates found, the state after, the weights."""
    calls: list = []
    pl.seed_everything(0)
    callbacks = importlib.import_module(f"{pl.__name__}.callbacks")
    with tempfile.TemporaryDirectory() as root:
        sizes = callbacks.BatchSizeFinder(max_trials=2, steps_per_trial=2)
        rates = callbacks.LearningRateFinder(num_training_steps=18)
        trainer = _trainer(pl, root, gpus=0, callbacks=[sizes, rates])
        model = _module(pl, calls)
        trainer.fit(model)
        return {
            "found": sizes.optimal_batch_size,
            "suggestion": rates.optimal_lr.suggestion(),
            "state": {k: v for k, v in _state(trainer, model, root).items() if k != "files"},
            "weights": _weights(model),
        }


def lr_find_validating(pl) -> dict:
    """``trainer.tuner.lr_find`` on a Trainer spelled for 1.x (``gpus=0``) whose module validates: 1.9.5's
    search validates before its first batch, which moves the generator the shuffled train loader draws from."""
    calls: list = []
    pl.seed_everything(0)
    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(pl, root, gpus=0)
        model = _module(pl, calls)
        model.validation_step = lambda batch, batch_idx: calls.append(["validation_step", batch_idx])
        model.val_dataloader = lambda: DataLoader(TensorDataset(torch.ones(24, 4), torch.ones(24, 1)), batch_size=8)
        finder = trainer.tuner.lr_find(model, num_training=6)
        return {"loss": [round(v, 6) for v in finder.results["loss"]], "calls": calls, "weights": _weights(model)}


def finder_then_validation(pl, finder: str) -> dict:
    """A finder callback (``"sizes"``: ``BatchSizeFinder(steps_per_trial=2)``, ``"rates"``:
    ``LearningRateFinder(num_training_steps=4)``, ``"both"``: the two, whose second search and the fit
    validate the 2 batches the first set its loaders up with) on a Trainer spelled for 1.x whose module validates
    (10 batches), then a 3-epoch fit with a full sanity check and ``reload_dataloaders_every_n_epochs=2``:
    1.9.5's fit validates as many batches as the search did until its loaders are asked for again."""
    calls: list = []
    pl.seed_everything(0)
    callbacks = importlib.import_module(f"{pl.__name__}.callbacks")
    searching = []
    if finder in ("sizes", "both"):
        searching.append(callbacks.BatchSizeFinder(max_trials=2, steps_per_trial=2))
    if finder in ("rates", "both"):
        searching.append(callbacks.LearningRateFinder(num_training_steps=4))
    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(
            pl,
            root,
            gpus=0,
            callbacks=searching,
            max_epochs=3,
            limit_train_batches=3,
            num_sanity_val_steps=-1,
            reload_dataloaders_every_n_epochs=2,
        )
        model = _module(pl, calls)

        def validation_step(batch, batch_idx):
            loss = nn.functional.mse_loss(model.layer(batch[0]), batch[1])
            model.log("val_loss", loss)
            calls.append(["validation_step", trainer.sanity_checking, trainer.current_epoch, batch_idx])

        def on_validation_epoch_end():
            calls.append(
                ["num_val_batches", trainer.num_val_batches, round(float(trainer.callback_metrics["val_loss"]), 6)]
            )

        model.validation_step = validation_step
        model.on_validation_epoch_end = on_validation_epoch_end
        generator = torch.Generator().manual_seed(5)
        data = TensorDataset(torch.randn(40, 4, generator=generator), torch.randn(40, 1, generator=generator))
        model.val_dataloader = lambda: calls.append(["val_dataloader"]) or DataLoader(data, batch_size=4)
        trainer.fit(model)
        return {"calls": calls, "weights": _weights(model)}


def measure(root: str) -> dict:
    pl = importlib.import_module(root)
    return {
        "power": scale_batch_size(pl, max_trials=2),
        "binsearch": scale_batch_size(pl, mode="binsearch", max_trials=2, steps_per_trial=2, init_val=3),
        "lr_find": lr_find(pl, num_training=18, max_lr=50.0, early_stop_threshold=None),
        "lr_find_update": lr_find(pl, num_training=18, min_lr=1e-4, max_lr=0.5, mode="linear", update_attr=True),
        "tune_both": tune_then_fit(pl, auto_lr_find=True, auto_scale_batch_size="binsearch"),
        "tuner_built": tuner_built(pl),
        "finder_callbacks": finder_callbacks(pl),
        "lr_find_validating": lr_find_validating(pl),
        "sizes_then_validation": finder_then_validation(pl, "sizes"),
        "rates_then_validation": finder_then_validation(pl, "rates"),
        "both_then_validation": finder_then_validation(pl, "both"),
    }
