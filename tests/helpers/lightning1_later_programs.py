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


def measure(root: str) -> dict:
    _numpy_inf()
    pl = importlib.import_module(root)
    return {
        "metrics_after_lr_find": metrics_after_tune(pl, search="lr_find"),
        "metrics_after_scale_batch_size": metrics_after_tune(pl, search="scale_batch_size"),
    }
