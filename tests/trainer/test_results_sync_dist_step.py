"""A step value logged with ``sync_dist=True`` is reduced across processes with its ``reduce_fx``,
as Lightning's ``_ResultMetric`` syncs it (reduced from Lightning's own
tests/tests_pytorch/trainer/logging_/test_train_loop_logging.py::test_logging_sync_dist_true[2-cpu]).

Before: trainmesh reduced every synced step value with "mean", whatever its ``reduce_fx``: under ddp_spawn
at 2 processes ``self.log("foo", 1 + rank, on_step=True, on_epoch=False, sync_dist=True, reduce_fx="sum")``
read 1.5 in ``trainer.callback_metrics`` where Lightning 2.6.6 reads 3 (and "max" read the mean too).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

pl = pytest.importorskip("lightning.pytorch")


class SyncedSteps:
    """Each rank logs its own numbers at each step, synced with each reduction."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        rank = self.trainer.global_rank
        for fx in ("sum", "mean", "max", "min"):
            self.log(f"step_{fx}", 1.0 + rank, on_step=True, on_epoch=False, sync_dist=True, reduce_fx=fx)
            self.log(f"both_{fx}", batch_idx + 2.0 * rank, on_step=True, on_epoch=True, sync_dist=True, reduce_fx=fx)
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 2, generator=torch.Generator().manual_seed(0))), batch_size=2)


class LightningSyncedSteps(SyncedSteps, pl.LightningModule):
    pass


class TrainmeshSyncedSteps(SyncedSteps, tm.Module):
    pass


def _metrics(framework, module, root):
    trainer = framework.Trainer(
        strategy="ddp_spawn",
        accelerator="cpu",
        devices=2,
        max_epochs=1,
        limit_train_batches=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module)
    return {name: value.item() for name, value in sorted(trainer.callback_metrics.items())}


def test_a_synced_step_value_is_reduced_with_its_reduce_fx(tmp_path):
    theirs = _metrics(pl, LightningSyncedSteps(), tmp_path / "l")
    assert theirs["step_sum"] == 3.0 and theirs["step_max"] == 2.0
    assert _metrics(tm, TrainmeshSyncedSteps(), tmp_path / "t") == theirs
