"""What Lightning 2.6 warns of as it sets each loader up, under Lightning and under trainmesh: an
evaluation loader that shuffles ("Your `val_dataloader`'s sampler has shuffling enabled ...", for
validation in fit, validate, test and predict), persistent workers pinning memory with
``reload_dataloaders_every_n_epochs``, and too few workers on a machine of 8 CPUs. Before,
trainmesh gave neither of the first two."""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

pl = pytest.importorskip("lightning.pytorch")

import trainmesh as tm  # noqa: E402

_ROWS = torch.arange(16, dtype=torch.float32).reshape(8, 2)
_WORDS = ("shuffl", "persistent", "workers")


def _module(framework: Any) -> Any:
    class Net(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def validation_step(self, batch, batch_idx):
            self.layer(batch)

        def test_step(self, batch, batch_idx):
            self.layer(batch)

        def predict_step(self, batch, batch_idx):
            return self.layer(batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net()


def _loader(**options: Any) -> DataLoader:
    return DataLoader(_ROWS, batch_size=2, **options)


# case: (entry point, its loaders by argument name, Trainer arguments)
CASES = {
    "fit-val-shuffled": ("fit", {"train_dataloaders": {"shuffle": True}, "val_dataloaders": {"shuffle": True}}, {}),
    "validate-shuffled": ("validate", {"dataloaders": {"shuffle": True}}, {}),
    "test-shuffled": ("test", {"dataloaders": {"shuffle": True}}, {}),
    "predict-shuffled": ("predict", {"dataloaders": {"shuffle": True}}, {}),
    "test-in-order": ("test", {"dataloaders": {}}, {}),
    "reload-persistent-pinned": (
        "fit",
        {"train_dataloaders": {"num_workers": 1, "persistent_workers": True, "pin_memory": True}},
        {"reload_dataloaders_every_n_epochs": 1, "limit_train_batches": 1},
    ),
}


def _warned(framework: Any, case: str) -> list[str]:
    entry, given, arguments = CASES[case]
    trainer = framework.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **arguments,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        getattr(trainer, entry)(_module(framework), **{name: _loader(**options) for name, options in given.items()})
    return sorted(
        f"{type(w.message).__name__}: {w.message}" for w in caught if any(word in str(w.message) for word in _WORDS)
    )


@pytest.mark.parametrize("case", list(CASES))
def test_loaders_are_warned_of_as_lightning_warns(case, monkeypatch):
    # 8 CPUs for both (Lightning's and trainmesh's worker counts read the affinity): the few-workers
    # warning comes too, with its count
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert _warned(tm, case) == _warned(pl, case)
