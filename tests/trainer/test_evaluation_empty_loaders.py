"""What ``trainer.validate`` / ``test`` / ``predict`` return where loaders give no batch, against
Lightning 2.6.6: its evaluation loop stores a loader's results when the batches move on to another
loader and once at the end, so an empty loader after the first adds no entry (trainmesh gave each
loader a dict: an extra ``{}``), an empty first loader still does, and a run with no batch at all is
skipped (validate/test ``[]``, predict ``None``; trainmesh gave ``[{}]`` and ``[]``)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")

SHAPES = {"full,empty": (8, 0), "empty,full": (0, 8), "full,empty,full": (8, 0, 8), "empty": (0,)}


def _loader(n: int) -> DataLoader:
    x = torch.arange(n * 2, dtype=torch.float32).view(n, 2)
    return DataLoader(TensorDataset(x), batch_size=4)


def empty_loaders_program(L, root):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("v", self.layer(batch[0]).sum())

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("t", self.layer(batch[0]).sum())

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self.layer(batch[0])

    def trainer():
        return L.pl.Trainer(**trainer_kwargs(root, logger=False, enable_checkpointing=False))

    found = {}
    for name, sizes in SHAPES.items():
        loaders = [_loader(n) for n in sizes]
        found[f"validate {name}"] = [sorted(d) for d in trainer().validate(Model(), loaders, verbose=False)]
        found[f"test {name}"] = [sorted(d) for d in trainer().test(Model(), loaders, verbose=False)]
    found["predict []"] = trainer().predict(Model(), [])
    found["predict empty"] = trainer().predict(Model(), _loader(0))
    return found


def test_empty_loaders_return_what_lightning_returns(tmp_path):
    found = run_both(empty_loaders_program, tmp_path)
    assert found["lightning"]["validate full,empty,full"] == [["v/dataloader_idx_0"], ["v/dataloader_idx_2"]]
    assert found["lightning"]["predict []"] is None
    assert found["trainmesh"] == found["lightning"]
