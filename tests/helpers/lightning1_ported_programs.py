"""Users' pytorch-lightning 1.x programs (the l-progs8 campaign), cut down to what trainmesh ran
differently from pytorch-lightning 1.9.5, as data: ``measure("pytorch_lightning")`` is recorded under
1.9.5 by ``record_lightning_1_9_ported_programs.py`` (its own venv) and compared with
``measure("trainmesh")`` by ``tests/test_model_configuration_lightning1.py`` and
``tests/trainer/test_publishing_epoch_end_names.py``, ``tests/test_module_logging_lightning1.py`` and
``tests/trainer/test_checkpointing_lightning1.py``.
"""

import importlib
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}


def _numpy_inf() -> None:
    """1.9.5's ModelCheckpoint reads ``np.Inf``, which NumPy 2 removed."""
    import numpy

    if "Inf" not in dir(numpy):
        numpy.Inf = numpy.inf


def own_configure_model(pl) -> dict:
    """A 1.x module (``training_step_end``) whose ``__init__`` calls a method of its own named
    ``configure_model`` (a wildfire detector's, stored file 30445910131): 1.9.5 has no such hook, so the
    layers are built once; Lightning 2.1+'s hook would build them again at fit and at
    ``load_from_checkpoint``, with new random weights."""

    class Detector(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.calls = 0
            self.configure_model()

        def configure_model(self):
            self.calls += 1
            self.model = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return {"loss": nn.functional.mse_loss(self.model(x), y)}

        def training_step_end(self, outputs):
            return outputs["loss"]

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    model = Detector()
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(max_epochs=1, default_root_dir=root, enable_checkpointing=False, **QUIET)
        trainer.fit(model, data)
        path = os.path.join(root, "fit.ckpt")
        trainer.save_checkpoint(path)
        loaded = Detector.load_from_checkpoint(path)
    return {
        "weights": [p.tolist() for p in model.model.parameters()],
        "calls": model.calls,
        "loaded_weights": [p.tolist() for p in loaded.model.parameters()],
        "loaded_calls": loaded.calls,
        "next_draw": torch.rand(1).item(),  # what a rebuild would have drawn from the generator shows here
    }


def name_logged_at_step_and_epoch_end(pl, hook: str = "training_epoch_end") -> dict:
    """A name logged on step in ``training_step`` and again in ``training_epoch_end`` (a vulnerability
    classifier's ``train/loss``, stored file 13366500994): after fit, ``logged_metrics`` holds the
    epoch-end value, as ``callback_metrics`` does."""

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log_dict({"train/loss": loss, "seen": float(batch_idx)})
            return {"loss": loss}

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def epoch_end(self, *outputs):
        self.log_dict({"train/loss": 100.0 + self.current_epoch, "seen": 50.0})

    setattr(Net, hook, epoch_end)
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = pl.Trainer(max_epochs=2, log_every_n_steps=1, enable_checkpointing=False, **QUIET)
    trainer.fit(Net(), data)
    return {
        "logged": {k: float(v) for k, v in sorted(trainer.logged_metrics.items())},
        "callback": {k: float(v) for k, v in sorted(trainer.callback_metrics.items())},
    }


def numpy_float_logged(pl) -> dict:
    """A 1.x module (``validation_epoch_end``) logging NumPy float64 values (a peptide-binding regressor's
    ``spearmanr(...)[0]``, stored file 37880889318; l-progs10 p08): on step, at an epoch's end, and as
    ``ModelCheckpoint``'s monitor. 1.9.5 keeps them float64 (``torch.tensor(value)``); a Python float
    beside them stays float32."""
    import numpy

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("step_corr", numpy.float64(loss.item()) / 3, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def validation_epoch_end(self, outputs):
            total = float(torch.stack(outputs).sum())
            self.log("corr", numpy.corrcoef([1.0, 2.0, 4.0], [1.0, 3.0, total])[0, 1])
            self.log("plain", total / 3)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    with tempfile.TemporaryDirectory() as root:
        checkpoint = pl.callbacks.ModelCheckpoint(dirpath=root, monitor="corr", mode="max")
        trainer = pl.Trainer(max_epochs=2, log_every_n_steps=1, default_root_dir=root, callbacks=[checkpoint], **QUIET)
        trainer.fit(Regressor(), data, data)
    return {
        "callback": {k: [str(v.dtype), v.item()] for k, v in sorted(trainer.callback_metrics.items())},
        "logged": {k: [str(v.dtype), v.item()] for k, v in sorted(trainer.logged_metrics.items())},
        "best": [str(checkpoint.best_model_score.dtype), checkpoint.best_model_score.item()],
    }


def checkpoint_states_after_test(pl, *, lightning1: bool = True) -> dict:
    """A ModelCheckpoint keeping every epoch, then ``trainer.test(ckpt_path="best")`` (a Graphormer
    pretraining driver's, stored file 8236349960; l-progs12 p07). 1.9.5 gives the callbacks their saved
    states in fit only, so after the test ``best_k_models`` and the last path are as fit left them;
    Lightning 2.6 turns them back to what the loaded (best) file knew. ``lightning1``: the module defines
    ``validation_epoch_end`` (a 1.x module), else ``on_validation_epoch_end`` (a 2.x one)."""

    class Scored(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", [3.0, 1.0, 2.0][self.current_epoch])  # the best at epoch 1 of 3

        def test_step(self, batch, batch_idx):
            self.log("test_out", self.layer(batch[0]).sum())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def epoch_end(self, *outputs):
        self.log("ended", float(self.current_epoch))

    setattr(Scored, "validation_epoch_end" if lightning1 else "on_validation_epoch_end", epoch_end)
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=4)
    with tempfile.TemporaryDirectory() as root:
        checkpoint = pl.callbacks.ModelCheckpoint(dirpath=root, monitor="val_loss", save_top_k=-1, save_last=True)
        trainer = pl.Trainer(max_epochs=3, default_root_dir=root, callbacks=[checkpoint], **QUIET)
        trainer.fit(Scored(), data, data)
        tested = trainer.test(ckpt_path="best", dataloaders=data, verbose=False)
    return {
        "best_k_models": sorted(os.path.basename(path) for path in checkpoint.best_k_models),
        "best": os.path.basename(checkpoint.best_model_path),
        "last": os.path.basename(checkpoint.last_model_path),
        "current_score": float(checkpoint.current_score),
        "tested": tested,
    }


def measure(root: str) -> dict:
    _numpy_inf()
    pl = importlib.import_module(root)
    return {
        "own_configure_model": own_configure_model(pl),
        "name_logged_at_step_and_epoch_end": name_logged_at_step_and_epoch_end(pl),
        "numpy_float_logged": numpy_float_logged(pl),
        "checkpoint_states_after_test": checkpoint_states_after_test(pl),
    }
