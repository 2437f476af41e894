"""ModelCheckpoint's top-k bookkeeping as a program reads it, under Lightning 2.6 and under its port.

A metric logged from a script (a NaN and values outside the top k among them, in float32 and in
float64) ranks checkpoints with ``save_top_k=3``; after each epoch's save a callback records what the
callback shows: ``current_score``, ``best_model_score``, ``kth_value``, ``kth_best_model_path``,
``best_model_path`` and ``best_k_models``, as their reprs (so a dtype shows), and the files kept.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")

SCRIPT = [0.5, 0.4, float("nan"), 0.6, 0.3, 0.45, 0.2]


def _relative(path, root):
    return os.path.relpath(path, root) if path else path


def ranked_by_a_scripted_metric(L, root, dtype):
    """The scripted metric ranks checkpoints; what the callback shows is recorded at each epoch's start
    (Lightning runs checkpoint callbacks after the others, so an epoch-end reading would come first)."""

    class Scripted(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            self.log("score", torch.tensor(SCRIPT[self.current_epoch], dtype=dtype))
            return self.net(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    seen = []

    def read(checkpoint):
        return {
            "current_score": repr(checkpoint.current_score),
            "best_model_score": repr(checkpoint.best_model_score),
            "kth_value": repr(checkpoint.kth_value),
            "kth_best_model_path": _relative(checkpoint.kth_best_model_path, root),
            "best_model_path": _relative(checkpoint.best_model_path, root),
            "best_k_models": {_relative(k, root): repr(v) for k, v in checkpoint.best_k_models.items()},
            "files": sorted(os.listdir(checkpoint.dirpath)) if os.path.isdir(checkpoint.dirpath) else [],
        }

    class Reader(L.pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            seen.append(read(trainer.checkpoint_callback))

    checkpoint = L.callbacks.ModelCheckpoint(dirpath=root / "ckpt", monitor="score", save_top_k=3)
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=len(SCRIPT), callbacks=[checkpoint, Reader()], logger=False)
    )
    trainer.fit(Scripted(), DataLoader(TensorDataset(torch.ones(2, 2)), batch_size=2))
    seen.append(read(checkpoint))
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_k_bookkeeping_reads_as_lightning_s(tmp_path, dtype):
    """Before: the scores were float64 tensors whatever the metric's dtype, ``current_score`` took a
    value that did not enter the top k (Lightning keeps the last one saved), and the k-th was named
    from the first save (Lightning names it once the top k is full; until then "" and ``inf``)."""
    found = run_both(lambda L, root: ranked_by_a_scripted_metric(L, root, dtype), tmp_path)
    theirs, ours = found["lightning"], found["trainmesh"]
    assert theirs[1]["kth_best_model_path"] == ""  # one save of three: no k-th yet
    assert len(theirs) == len(ours)
    for epoch, (a, b) in enumerate(zip(theirs, ours)):
        assert b == a, f"after epoch {epoch - 1}"


def step_saves_before_the_first_validation(L, root):
    """Saves every step (and on a zero time interval) ranked by a metric only validation logs, and
    validation only in the second (last) epoch: Lightning defers each save to the validation's end."""

    class ValidatedEveryOtherEpoch(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            pass

        def on_validation_epoch_end(self):
            self.log("auroc", torch.tensor([0.2, 0.6][self.current_epoch]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    found = []
    for trigger in ({"every_n_train_steps": 1}, {"train_time_interval": timedelta(0), "every_n_train_steps": 0}):
        checkpoint = L.callbacks.ModelCheckpoint(
            dirpath=root / str(len(found)),
            monitor="auroc",
            mode="max",
            every_n_epochs=0,
            save_on_train_epoch_end=False,
            **trigger,
        )
        settings = dict(max_epochs=2, check_val_every_n_epoch=2, num_sanity_val_steps=0, logger=False)
        trainer = L.pl.Trainer(**trainer_kwargs(root, callbacks=[checkpoint], **settings))
        data = DataLoader(TensorDataset(torch.ones(4, 1)), batch_size=2)
        trainer.fit(ValidatedEveryOtherEpoch(), data, data)
        files = sorted(os.listdir(checkpoint.dirpath)) if os.path.isdir(checkpoint.dirpath) else []
        found.append((repr(checkpoint.best_model_score), files))
    return found


def test_a_step_save_waits_for_the_validation_that_logs_its_metric(tmp_path):
    """Before: trainmesh saved at the step unranked (a warning) and nothing at the validation's end,
    so a time-interval callback kept no checkpoint and ``best_model_score`` stayed None."""
    found = run_both(step_saves_before_the_first_validation, tmp_path)
    assert found["lightning"][1][0] == "tensor(0.6000)"
    assert found["trainmesh"] == found["lightning"]
