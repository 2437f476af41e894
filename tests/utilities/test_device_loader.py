"""DeviceDataLoader.set_epoch tells the samplers Lightning's ``_set_sampler_epoch`` tells: the loader's
sampler and its batch sampler's sampler, each once."""

import copy
import os

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

from trainmesh.utilities.device_loader import DeviceDataLoader


class _Recording(SequentialSampler):
    def __init__(self, data, name, calls):
        super().__init__(data)
        self.name, self.calls = name, calls

    def set_epoch(self, epoch):
        self.calls.append((self.name, epoch))


def _loaders(calls):
    data = TensorDataset(torch.arange(6.0))
    shared = _Recording(data, "shared", calls)
    one = DataLoader(data, sampler=shared, batch_size=2)  # the loader's sampler is the batch sampler's
    inner = _Recording(data, "inner", calls)
    # a batch sampler around a sampler of its own, beside an epoch-aware sampler of the loader's (as a
    # loader class of one's own may hold): both are told
    two = DataLoader(data, batch_sampler=BatchSampler(inner, batch_size=2, drop_last=False))
    object.__setattr__(two, "sampler", _Recording(data, "outer", calls))
    return [one, two]


def test_set_epoch_tells_the_samplers_lightning_tells():
    fabric_data = pytest.importorskip("lightning.fabric.utilities.data")
    theirs, ours = [], []
    for loader in _loaders(theirs):
        fabric_data._set_sampler_epoch(loader, 3)
    for loader in _loaders(ours):
        DeviceDataLoader(loader, lambda batch: batch, lambda: False).set_epoch(3)
    assert ours == theirs == [("shared", 3), ("outer", 3), ("inner", 3)]


def _deepcopied_callbacks(Trainer, BoringModel, ModelCheckpoint, root):
    checkpoint = ModelCheckpoint(dirpath=root, save_last=True)
    trainer = Trainer(
        default_root_dir=root,
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=1,
        logger=False,
        callbacks=[checkpoint],
    )  # fmt: skip (the progress bar's callback holds the trainer, and so its loaders)
    trainer.fit(BoringModel())
    copies = copy.deepcopy(trainer.callbacks)  # what Lightning's test_restore.py does after a fit
    (copied,) = [c for c in copies if isinstance(c, ModelCheckpoint)]
    return os.path.basename(copied.best_model_path), copied.best_k_models == checkpoint.best_k_models


def test_the_callbacks_of_a_fit_deep_copy_as_lightning_s(tmp_path):
    # A callback holding the trainer reaches its loaders: deepcopy asked the half-made copy of a
    # DeviceDataLoader for ``loader`` through __getattr__, which asked again (RecursionError).
    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.callbacks import ModelCheckpoint as PlModelCheckpoint
    from lightning.pytorch.demos.boring_classes import BoringModel as PlBoringModel

    import trainmesh as tm
    from trainmesh.callbacks import ModelCheckpoint as TmModelCheckpoint
    from trainmesh.demos.boring_classes import BoringModel as TmBoringModel

    theirs = _deepcopied_callbacks(pl.Trainer, PlBoringModel, PlModelCheckpoint, tmp_path / "pl")
    ours = _deepcopied_callbacks(tm.Trainer, TmBoringModel, TmModelCheckpoint, tmp_path / "tm")
    assert ours == theirs == ("epoch=0-step=1.ckpt", True)
