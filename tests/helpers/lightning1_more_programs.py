"""Users' pytorch-lightning 1.x programs of the l1-progs16 campaign, cut down to what trainmesh ran
differently from pytorch-lightning 1.9.5, as data: ``measure("pytorch_lightning")`` is recorded under
1.9.5 by ``record_lightning_1_9_more_programs.py`` (its own venv) and compared with
``measure("trainmesh")`` by the tests named in each function.
"""

import importlib
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}


def _numpy_inf() -> None:
    """1.9.5's ModelCheckpoint reads ``np.Inf``, which NumPy 2 removed."""
    import numpy

    if "Inf" not in dir(numpy):
        numpy.Inf = numpy.inf


def batch_size_search_on_a_set_up_dataset(pl, *, owner: str) -> dict:
    """``Trainer(auto_scale_batch_size="binsearch")`` + ``trainer.tune(model)`` where the train loader's dataset
    is made in ``setup`` (the module's own, as a benchmark of n-ary losses does, stored file 9146585018, or a
    data module's): 1.9.5's search runs inside a fit, after the setup hooks. Checked by
    ``tests/trainer/lightning1/test_batch_size_search.py``."""

    class Data(pl.LightningDataModule):
        def __init__(self):
            super().__init__()
            self.batch_size = 2

        def setup(self, stage=None):
            self.train = TensorDataset(torch.randn(24, 3))

        def train_dataloader(self):
            return DataLoader(self.train, batch_size=self.batch_size, shuffle=True, drop_last=True)

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)
            self.batch_size = 2

        def setup(self, stage):
            self.max_epochs = self.trainer.max_epochs  # attached by then, as in a fit
            if owner == "module":
                self.train_dataset = TensorDataset(torch.randn(24, 3))

        def train_dataloader(self):
            return DataLoader(self.train_dataset, batch_size=self.batch_size, shuffle=True, drop_last=True)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    if owner == "datamodule":
        del Regressor.train_dataloader
    torch.manual_seed(0)
    model, data = Regressor(), Data()
    holder = data if owner == "datamodule" else model
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(max_epochs=2, default_root_dir=root, auto_scale_batch_size="binsearch", **QUIET)
        on = {"datamodule": data} if owner == "datamodule" else {}
        found = trainer.tune(model, scale_batch_size_kwargs={"max_trials": 3}, **on)["scale_batch_size"]
        trainer.fit(model, **on)
    return {
        "found": found,
        "batch_size": holder.batch_size,
        "weight": [round(float(v), 6) for v in model.layer.weight.flatten()],
        "loss": round(float(trainer.callback_metrics["loss"]), 6),
    }


def last_checkpoint_after_no_improvement(pl, *, lightning1_hook: bool) -> dict:
    """``ModelCheckpoint(save_last=True, save_top_k=1, monitor="val_loss")`` over epochs whose ``val_loss`` improves,
    then does not (a trachoma classifier with ``training_step_end``, stored file 63616745055, resumes from
    ``last.ckpt``): 1.9.5 writes ``last.ckpt`` at every epoch end; Lightning 2.6 only where a top-k file was written.
    Checked by ``tests/callbacks/test_checkpoint_last_lightning1.py``."""
    import os

    Regressor = _regressor_class(pl, lightning1_hook=lightning1_hook)
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4)
    with tempfile.TemporaryDirectory() as root:
        callback = pl.callbacks.ModelCheckpoint(dirpath=root, save_last=True, save_top_k=1, monitor="val_loss")
        options = {**QUIET, "enable_checkpointing": True}
        trainer = pl.Trainer(max_epochs=4, default_root_dir=root, callbacks=[callback], **options)
        trainer.fit(Regressor(), loader, loader)
        last = torch.load(os.path.join(root, "last.ckpt"), weights_only=False)
        return {"files": sorted(os.listdir(root)), "last_global_step": last["global_step"], "last_epoch": last["epoch"]}


def trainer_spelled_for_1x(pl, *, spelling: str) -> dict:
    """A module with no 1.x-only hook, run by a Trainer only 1.x can build (l1-progs16 p04's ``Trainer(gpus=0)``,
    p06's ``Trainer.from_argparse_args``, ``"plugin"``: 1.x's ``plugins=SingleDevicePlugin(...)``; spelling ``"2.x"``: neither): pytorch-lightning 1.9.5 is the owner,
    so its order of draws (the train iterator made after ``on_train_epoch_start``), its last.ckpt at every
    epoch end and its LearningRateMonitor (not in ``callback_metrics``). Checked by
    ``tests/trainer/lightning1/test_trainer_members_generation.py``."""
    import os
    from argparse import Namespace

    draws: list = []

    class Probe(pl.Callback):
        def on_train_start(self, trainer, module):
            draws.append(["start", round(torch.rand(1).item(), 6)])

        def on_train_epoch_start(self, trainer, module):
            draws.append(["epoch", trainer.current_epoch, round(torch.rand(1).item(), 6)])

    Regressor = _regressor_class(pl, lightning1_hook=False)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(8, 3))
    train, val = DataLoader(data, batch_size=4, shuffle=True), DataLoader(data, batch_size=4)
    with tempfile.TemporaryDirectory() as root:
        checkpoint = pl.callbacks.ModelCheckpoint(dirpath=root, save_last=True, save_top_k=1, monitor="val_loss")
        callbacks = [checkpoint, Probe(), pl.callbacks.LearningRateMonitor()]
        logger = pl.loggers.CSVLogger(root, name="csv", version=0)
        options = {**QUIET, "enable_checkpointing": True, "max_epochs": 3, "default_root_dir": root, "logger": logger}
        if spelling == "gpus":
            trainer = pl.Trainer(gpus=0, callbacks=callbacks, **options)
        elif spelling == "argparse":
            trainer = pl.Trainer.from_argparse_args(Namespace(**options), callbacks=callbacks)
        elif spelling == "plugin":  # (pytorch-lightning <= 1.7's name: 1.8 removed it, so not recorded)
            trainer = pl.Trainer(
                plugins=pl.plugins.SingleDevicePlugin(torch.device("cpu")), callbacks=callbacks, **options
            )
        else:
            trainer = pl.Trainer(accelerator="cpu", devices=1, callbacks=callbacks, **options)
        module = Regressor()
        trainer.fit(module, train, val)
        last = torch.load(os.path.join(root, "last.ckpt"), weights_only=False)
        with open(os.path.join(root, "csv", "version_0", "metrics.csv")) as table:
            header = table.readline().strip()
        return {
            "draws": draws,
            "csv_header": header,
            "last_global_step": last["global_step"],
            "callback_metrics": sorted(trainer.callback_metrics),
            "weight": [round(w, 6) for w in module.layer.weight.flatten().tolist()],
        }


def checkpoint_folder_after_tune(pl) -> dict:
    """``Trainer(auto_lr_find=True)`` with its default ModelCheckpoint and a logger, ``trainer.tune`` then
    ``fit`` (stanton119/data-analysis's probabilistic regression, l1-progs17): 1.9.5 sets the run's callbacks
    up with the run's logger, so the checkpoint lands in the logger's version folder. Checked by
    ``tests/trainer/lightning1/test_tuner.py``."""
    import os

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 3), torch.randn(32, 1))
    module = _regressor_class(pl, lightning1_hook=False)()
    module.learning_rate = 0.1
    with tempfile.TemporaryDirectory() as root:
        logger = pl.loggers.CSVLogger(root)
        trainer = pl.Trainer(
            default_root_dir=root, logger=logger, max_epochs=2, auto_lr_find=True, enable_progress_bar=False
        )
        trainer.tune(
            module,
            DataLoader(data, batch_size=8),
            DataLoader(data, batch_size=8),
            lr_find_kwargs={"num_training": 16, "early_stop_threshold": None},
        )
        trainer.fit(module, DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
        files = sorted(
            os.path.relpath(os.path.join(folder, name), root)
            for folder, _, names in os.walk(root)
            for name in names
            if name.endswith(".ckpt")
        )
        return {
            "dirpath": os.path.relpath(trainer.checkpoint_callback.dirpath, root),
            "checkpoints": files,
            "learning_rate": module.learning_rate,
            "weight": [round(w, 6) for w in module.layer.weight.flatten().tolist()],
        }


def measure(root: str) -> dict:
    _numpy_inf()
    pl = importlib.import_module(root)
    return {
        "batch_size_search_module_setup": batch_size_search_on_a_set_up_dataset(pl, owner="module"),
        "batch_size_search_datamodule_setup": batch_size_search_on_a_set_up_dataset(pl, owner="datamodule"),
        "last_checkpoint_lightning1_module": last_checkpoint_after_no_improvement(pl, lightning1_hook=True),
        "trainer_gpus_0": trainer_spelled_for_1x(pl, spelling="gpus"),
        "trainer_from_argparse_args": trainer_spelled_for_1x(pl, spelling="argparse"),
        "checkpoint_folder_after_tune": checkpoint_folder_after_tune(pl),
    }


def _regressor_class(pl, *, lightning1_hook: bool):
    """The one-layer regressor both last.ckpt programs train: ``val_loss`` improves for two epochs, then not;
    ``lightning1_hook``: with a ``training_step_end`` (a hook only 1.x has)."""

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", float(abs(self.current_epoch - 1)))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    if not lightning1_hook:
        return Regressor

    class RegressorWithStepEnd(Regressor):
        def training_step_end(self, out):
            return out

    return RegressorWithStepEnd
