"""What follows a pytorch-lightning 1.x run's generation rather than its module's hooks, as data:
``measure("pytorch_lightning")`` is recorded under 1.9.5 by ``record_lightning_1_9_run_generation.py`` (its
own venv) and compared with ``measure("trainmesh")`` by ``tests/trainer/lightning1/test_trainer_members_run_generation.py``.
Each Trainer is built by ``Trainer.from_argparse_args`` (a spelling only 1.x has, so the run is 1.x's under
trainmesh whatever its module), with a module that defines no 1.x-only hook.
"""

import importlib
import warnings
from argparse import Namespace

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}
# Every precision pytorch-lightning 1.9.5's Trainer accepts (its _PRECISION_INPUT), and its default (None here)
PRECISIONS = [None, 64, 32, 16, "64", "32", "16", "bf16"]


def precision_answers(pl) -> dict:
    """``trainer.precision`` on CPU for each precision 1.9.5 accepts (its own strings: ``"32"``, ``"bf16"``,
    where Lightning 2.6 answers ``"32-true"``, ``"bf16-mixed"``)."""
    answers = {}
    for precision in PRECISIONS:
        given = {} if precision is None else {"precision": precision}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = pl.Trainer.from_argparse_args(Namespace(accelerator="cpu", devices=1, **QUIET, **given))
        answers[repr(precision)] = trainer.precision
    return answers


def ddp_unused_head(pl) -> dict:
    """A module with a head its loss never reads under ``strategy="ddp"`` (one process): 1.9.5's DDPStrategy
    sets ``find_unused_parameters=True`` where the program gives none, so it trains (with 2.x's False, DDP's
    unused-parameter error stops it at the second step); after fit,
    ``trainer.precision`` too (``precision=16`` on CPU: bf16)."""

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)
            self.aux_head = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            (x,) = batch
            return self.layer(x).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(16, 3)), batch_size=4)
    arguments = Namespace(strategy="ddp", accelerator="cpu", devices=1, max_steps=3, precision=16, **QUIET)
    trainer = pl.Trainer.from_argparse_args(arguments)
    module = Regressor()
    trainer.fit(module, loader)
    return {
        "global_step": trainer.global_step,
        "precision": trainer.precision,
        "weight": [round(w, 6) for w in module.layer.weight.flatten().tolist()],
    }


def missing_checkpoint(pl) -> list:
    """``fit(ckpt_path=<a file that is not there>)``: the exception's class and words (1.9.5's own)."""

    class Regressor(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = pl.Trainer.from_argparse_args(Namespace(accelerator="cpu", devices=1, max_steps=1, **QUIET))
    try:
        trainer.fit(Regressor(), DataLoader(TensorDataset(torch.randn(4, 3))), ckpt_path="missing.ckpt")
    except Exception as error:  # noqa: BLE001  # what is compared
        return [type(error).__name__, str(error)]
    return ["ran"]


def measure(root: str) -> dict:
    pl = importlib.import_module(root)
    return {
        "precision_answers": precision_answers(pl),
        "ddp_unused_head": ddp_unused_head(pl),
        "missing_checkpoint": missing_checkpoint(pl),
    }
