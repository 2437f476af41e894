"""``str(datamodule)`` and ``LightningDataModule.from_datasets`` as Lightning 2.6 defines them, run
under Lightning and trainmesh: the loaders' availability and dataset sizes; the keyword arguments
``from_datasets`` passes to the class's ``__init__`` (``batch_size`` / ``num_workers`` where it names
them); the loaders' batch size and ``pin_memory``."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import TensorDataset


def _answers(framework) -> list[object]:
    data = TensorDataset(torch.zeros(5, 1))

    class Sized(framework.LightningDataModule):
        def __init__(self, batch_size: int = 7, extra: int = 1) -> None:
            super().__init__()
            self.size, self.extra = batch_size, extra

    class Failing(framework.LightningDataModule):
        def train_dataloader(self):
            raise RuntimeError("no data yet")

    plain = framework.LightningDataModule.from_datasets(data, val_dataset=[data, data], batch_size=2)
    made = Sized.from_datasets(data, batch_size=3, extra=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (pin_memory without an accelerator)
        loader = made.train_dataloader()
    return [
        str(plain),
        str(framework.LightningDataModule()),
        str(Failing()),
        (made.size, made.extra, loader.batch_size, loader.pin_memory),
    ]


def test_str_and_from_datasets_answer_as_lightning_s() -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _answers(lightning)
    assert "{Validation dataloader: 1. size=5 ; 2. size=5}" in expected[0]
    assert _answers(trainmesh) == expected
