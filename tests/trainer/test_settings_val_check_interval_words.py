"""A ``val_check_interval`` Lightning 2.6 refuses stops here with its exception class and its words: a float
with ``check_val_every_n_epoch=None`` and one out of range (when the Trainer is built), an int above the
epoch's batches and a fraction of an iterable stream (when fit sets up its train loader). Before: the same
classes but trainmesh's own words (and a plain ValueError for the stream)."""

import logging
import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import trainmesh as tm


class _Stream(IterableDataset):
    def __iter__(self):
        return iter([(torch.ones(3),)] * 8)


def refusals(pl) -> dict:
    """Each case's exception: whether it is Lightning's MisconfigurationException / a ValueError, and its words."""
    from importlib import import_module

    misconfiguration = import_module(f"{pl.__name__}.utilities.exceptions").MisconfigurationException

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            pass

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.ones(16, 3)), batch_size=4)
    quiet = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    cases = {
        "fraction, check_val_every_n_epoch=None": (dict(val_check_interval=0.5, check_val_every_n_epoch=None), data),
        "above one": (dict(val_check_interval=1.5), data),
        "negative": (dict(val_check_interval=-1), data),
        "int above the epoch's batches": (dict(val_check_interval=10), data),
        "fraction of a stream": (dict(val_check_interval=0.5), DataLoader(_Stream(), batch_size=4)),
    }
    found = {}
    for name, (arguments, loader) in cases.items():
        try:
            pl.Trainer(accelerator="cpu", devices=1, max_steps=2, **quiet, **arguments).fit(Model(), loader, data)
            found[name] = "ran"
        except Exception as error:  # noqa: BLE001  # each case's exception is what is compared
            found[name] = (isinstance(error, misconfiguration), isinstance(error, ValueError), str(error))
    return found


def test_val_check_interval_refused_with_lightning_s_class_and_words(caplog):
    lightning = pytest.importorskip("lightning.pytorch")
    caplog.set_level(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, ours = refusals(lightning), refusals(tm)
    for name, (misconfigured, value_error, words) in theirs.items():
        # a trainmesh MisconfigurationException is a ValueError too where trainmesh raised one before
        assert ours[name][0] == misconfigured and (ours[name][1] or not value_error), name
        assert ours[name][2] == words, name
