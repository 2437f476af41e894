"""``ModelCheckpoint._monitor_candidates(trainer)``, which published programs override (to add a
metric, or rename one), under Lightning 2.6 and under its port: the files a subclass saves, their
names and ``best_model_score``; and ``monitor=None`` with ``save_top_k>1`` set after construction
(neither library checks it then: both keep every epoch's checkpoint, ``best_model_score`` None).
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")

SCRIPT = [0.5, 0.3, 0.4, 0.2]


def _module(L):
    class Scripted(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            self.log("loss_raw", torch.tensor(SCRIPT[self.current_epoch]))
            return self.net(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Scripted()


def _fit(L, root, checkpoint):
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=len(SCRIPT), callbacks=[checkpoint], logger=False))
    trainer.fit(_module(L), DataLoader(TensorDataset(torch.ones(2, 2)), batch_size=2))
    files = sorted(os.listdir(checkpoint.dirpath))
    return {
        "files": files,
        "best": repr(checkpoint.best_model_score),
        "best_path": os.path.basename(checkpoint.best_model_path),
    }


def overridden_candidates(L, root):
    """The override renames ``loss_raw`` to ``score`` and adds the epoch times ten: the callback ranks
    and names by them (there is no ``score`` without the override)."""
    calls = []

    class Renaming(L.callbacks.ModelCheckpoint):
        def _monitor_candidates(self, trainer):
            candidates = super()._monitor_candidates(trainer)
            calls.append(trainer.current_epoch)
            candidates["score"] = candidates.pop("loss_raw", torch.tensor(9.0)) * 2
            candidates["tens"] = torch.tensor(trainer.current_epoch * 10)
            return candidates

    checkpoint = Renaming(dirpath=root / "ckpt", monitor="score", save_top_k=2, filename="{tens}-{score:.2f}")
    return {**_fit(L, root, checkpoint), "called at epochs": calls}


def no_monitor_top_k_set_later(L, root):
    checkpoint = L.callbacks.ModelCheckpoint(dirpath=root / "ckpt")
    checkpoint.save_top_k = 3  # after construction: neither library checks it here
    return _fit(L, root, checkpoint)


def test_an_overridden_monitor_candidates_ranks_and_names_as_lightning_s(tmp_path):
    """Before: trainmesh never called the method, so ``score`` was missing (a MisconfigurationException
    naming the logged metrics) where Lightning saved ``tens=20-score=0.40.ckpt`` and its kin."""
    found = run_both(overridden_candidates, tmp_path)
    assert found["lightning"]["files"] == ["tens=10-score=0.60.ckpt", "tens=30-score=0.40.ckpt"]
    assert found["trainmesh"] == found["lightning"]


def test_no_monitor_with_top_k_set_after_construction_as_lightning_s(tmp_path):
    found = run_both(no_monitor_top_k_set_later, tmp_path)
    assert found["lightning"]["files"] == [f"epoch={e}-step={e + 1}.ckpt" for e in range(len(SCRIPT))]
    assert found["trainmesh"] == found["lightning"]
