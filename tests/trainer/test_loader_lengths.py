"""What Lightning 2.6 says of a loader's length as each loop sets its loaders up, under Lightning and
under trainmesh: an ``IterableDataset`` with a ``__len__`` warns (its workers may read it twice), an
empty loader warns ("Total length of `DataLoader` across ranks is zero", and the training loader's
``CombinedLoader``), a fractional ``limit_*_batches`` with a loader without a length stops with
Lightning's words. Before, trainmesh said none of it (and gave its own words for the last)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

pl = pytest.importorskip("lightning.pytorch")

import trainmesh as tm  # noqa: E402

_ROWS = torch.arange(16, dtype=torch.float32).reshape(8, 2)


class _Iterable(IterableDataset):
    def __iter__(self):
        return iter(_ROWS)


class _IterableWithLen(_Iterable):
    def __len__(self) -> int:
        return len(_ROWS)


def _module(framework: Any) -> Any:
    class Net(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.layer(batch)

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            self.layer(batch)

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self.layer(batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net()


def _loader(kind: str) -> DataLoader:
    dataset = {"len": _IterableWithLen(), "iter": _Iterable(), "empty": _ROWS[:0]}.get(kind, _ROWS)
    return DataLoader(dataset, batch_size=2)


# case: (entry point, its loaders by argument name, Trainer limits)
CASES = {
    "fit-iterable-with-len": ("fit", {"train_dataloaders": "len", "val_dataloaders": "len"}, {}),
    "validate-iterable-with-len": ("validate", {"dataloaders": ["len", "rows"]}, {}),
    "test-iterable-with-len": ("test", {"dataloaders": "len"}, {}),
    "predict-iterable-with-len": ("predict", {"dataloaders": "len"}, {}),
    "fit-iterable-without-len": ("fit", {"train_dataloaders": "iter", "val_dataloaders": "iter"}, {}),
    "fit-empty-train": ("fit", {"train_dataloaders": "empty", "val_dataloaders": "rows"}, {}),
    "fit-empty-val": ("fit", {"train_dataloaders": "rows", "val_dataloaders": "empty"}, {}),
    "fit-two-train-one-empty": ("fit", {"train_dataloaders": ["rows", "empty"]}, {}),
    "test-empty": ("test", {"dataloaders": "empty"}, {}),
    "fit-fraction-of-iterable": ("fit", {"train_dataloaders": "iter"}, {"limit_train_batches": 0.5}),
    "validate-fraction-of-iterable": ("validate", {"dataloaders": "iter"}, {"limit_val_batches": 0.5}),
    "predict-fraction-of-iterable": ("predict", {"dataloaders": "iter"}, {"limit_predict_batches": 0.5}),
}


def _said(framework: Any, case: str) -> dict[str, Any]:
    entry, given, limits = CASES[case]
    loaders = {
        name: [_loader(kind) for kind in kinds] if isinstance(kinds, list) else _loader(kinds)
        for name, kinds in given.items()
    }
    trainer = framework.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **limits,
    )
    said: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            getattr(trainer, entry)(_module(framework), **loaders)
        except Exception as error:  # the record compares it
            said["error"] = str(error)
    said["warnings"] = sorted(
        str(w.message) for w in caught if "__len__" in str(w.message) or "Total length" in str(w.message)
    )
    return said


@pytest.mark.parametrize("case", list(CASES))
def test_loader_lengths_are_told_as_lightning_tells_them(case):
    assert _said(tm, case) == _said(pl, case)
