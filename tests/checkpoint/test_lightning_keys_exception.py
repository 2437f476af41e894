"""The optimizer progress an ``OnExceptionCheckpoint`` saves when ``training_step`` raises on a batch that steps,
under Lightning 2.6.6 and trainmesh: Lightning counts that step ``ready`` before its closure trains the batch, so
its saved ``optim_progress.optimizer.step`` is one ready ahead of completed (total 8/7, current 3/2 in
resume-loops' "exc" program). Before: trainmesh saved 7/7 and 2/2. An exception on a batch inside an accumulation
window counts nothing (no step begun). Resumed from that file, Lightning keeps the total one ready ahead for
the whole fit (its current until its epoch loop starts): before, trainmesh showed and saved ready == completed."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer

L = pytest.importorskip("lightning.pytorch")


def _saved_step_progress(framework, folder, accumulate: int) -> dict:
    class Raises(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            if (self.current_epoch, batch_idx) == (1, 2) and not self.trainer.ckpt_path:
                raise RuntimeError("raised in training_step")
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(8, 2, generator=torch.Generator().manual_seed(0))), batch_size=2)
    checkpoint = framework.callbacks.OnExceptionCheckpoint(dirpath=folder, filename="on_exception")
    trainer = quiet_trainer(
        framework=framework,
        max_epochs=3,
        accumulate_grad_batches=accumulate,
        callbacks=[checkpoint],
        enable_checkpointing=True,
    )
    with pytest.raises(RuntimeError, match="raised in training_step"):
        trainer.fit(Raises(), data)
    saved = torch.load(f"{folder}/on_exception.ckpt", weights_only=False)
    progress = saved["loops"]["fit_loop"]["epoch_loop.automatic_optimization.optim_progress"]
    # resumed (past the raise: epoch 2's batches), Lightning keeps total.ready one ahead for the whole fit
    seen = []

    class Reads(framework.Callback):
        def on_train_start(self, trainer, module):
            step = trainer.fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer.step
            seen.append((step.total.ready, step.total.completed, step.current.ready, step.current.completed))

        on_train_end = on_train_start

    resumed = quiet_trainer(framework=framework, max_epochs=3, accumulate_grad_batches=accumulate, callbacks=[Reads()])
    resumed.fit(Raises(), data, ckpt_path=f"{folder}/on_exception.ckpt")
    resumed.save_checkpoint(f"{folder}/end.ckpt")
    at_end = torch.load(f"{folder}/end.ckpt", weights_only=False)["loops"]["fit_loop"]
    return progress, seen, at_end["epoch_loop.automatic_optimization.optim_progress"]


@pytest.mark.parametrize("accumulate", [1, 2, 3])
def test_a_step_begun_when_training_step_raised_is_saved_ready(accumulate, tmp_path):
    theirs = _saved_step_progress(L, tmp_path / "pl", accumulate)
    ours = _saved_step_progress(tm, tmp_path / "tm", accumulate)
    assert ours == theirs
    step = theirs[0]["optimizer"]["step"]["total"]
    assert (step["ready"] - step["completed"]) == ((2 + 1) % accumulate == 0)  # batch 2 ends a window: a step
