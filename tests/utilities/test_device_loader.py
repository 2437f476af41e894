"""DeviceDataLoader.set_epoch tells the samplers Lightning's ``_set_sampler_epoch`` tells: the loader's
sampler and its batch sampler's sampler, each once."""

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
