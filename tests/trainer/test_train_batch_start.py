"""A training batch that is None (a ``collate_fn`` dropping a whole batch) is skipped as Lightning 2.6
skips it (reduced from Lightning's own tests/tests_pytorch/loops/test_training_loop_flow_scalar.py::
test_training_step_none_batches): one warning, no on_train_batch_start and no training step, no
optimizer step, yet the step-interval scheduler due at it steps and on_train_batch_end gets
``outputs=None``.

Before: trainmesh gave None to training_step (a TypeError in the model's forward)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.dataloader import default_collate

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def none_batches(L, root, accumulate):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net, self.calls, self.fetched = nn.Linear(3, 1), [], 0

        def collate(self, rows):  # every third batch dropped
            self.fetched += 1
            return None if self.fetched % 3 == 1 else default_collate(rows)

        def train_dataloader(self):
            data = TensorDataset(torch.randn(12, 3, generator=torch.Generator().manual_seed(0)), torch.randn(12, 1))
            return DataLoader(data, batch_size=2, collate_fn=self.collate)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return [opt], [{"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5), "interval": "step"}]

        def on_train_batch_start(self, batch, batch_idx):
            self.calls.append(("start", batch_idx))

        def on_train_batch_end(self, outputs, batch, batch_idx):
            lr = self.trainer.optimizers[0].param_groups[0]["lr"]
            self.calls.append(("end", batch_idx, outputs is None, self.trainer.global_step, lr))

    model = Model()
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=2, limit_val_batches=0, logger=False, enable_checkpointing=False),
        enable_model_summary=False,
        accumulate_grad_batches=accumulate,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model)
    told = [str(w.message) for w in caught if "yielded None" in str(w.message)]
    progress = trainer.fit_loop.epoch_loop.batch_progress.total
    counts = (progress.ready, progress.started, progress.processed, progress.completed)
    return told, model.calls, counts, trainer.global_step, model.net.weight.detach().clone()


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_none_batch_is_skipped_as_lightning_skips_it(tmp_path, accumulate):
    found = run_both(lambda L, root: none_batches(L, root, accumulate), tmp_path)
    theirs, ours = found["lightning"], found["trainmesh"]
    assert theirs[0] == ["train_dataloader yielded None. If this was on purpose, ignore this warning..."]
    # the first batch: skipped; the scheduler steps at it where it ends an accumulation window
    assert theirs[1][0] == ("end", 0, True, 0, 0.05 if accumulate == 1 else 0.1)
    assert ours[:4] == theirs[:4]
    assert torch.equal(ours[4], theirs[4])
