"""A validation metric logged without ``sync_dist`` that differs by rank, monitored by
``ModelCheckpoint(save_top_k=1)`` and ``EarlyStopping`` under ``strategy="ddp"`` at 2 CPU processes:
``python model_checkpoint_ddp_run.py lightning|trainmesh OUT``. Each process writes
``OUT/rank<r>.pt``: the checkpoint files, its best score, where it stopped, its weights.
Rank 1's value rises from epoch 1 on while rank 0's falls: Lightning's ranks decide a top-k save
together (all of them, ``check_monitor_top_k``) and a stop together (any of them)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if sys.argv[1] == "lightning":
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
else:
    import trainmesh as pl
    from trainmesh.callbacks import EarlyStopping, ModelCheckpoint

_gen = torch.Generator().manual_seed(0)
W = torch.tensor([[1.0], [-2.0], [0.5]])
X, XV = torch.randn(32, 3, generator=_gen), torch.randn(12, 3, generator=_gen)


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.values = []  # this rank's own_val after each epoch

    def training_step(self, batch, batch_idx):
        return nn.functional.mse_loss(self.layer(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        loss = nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        self.log("own_val", loss + (self.current_epoch * 0.5 if self.global_rank == 1 else 0.0))

    def on_validation_epoch_end(self):
        self.values.append(float(self.trainer.callback_metrics["own_val"]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(out: Path) -> None:
    pl.seed_everything(2)
    checkpoint = ModelCheckpoint(dirpath=out / "ck", monitor="own_val", save_top_k=1, filename="{epoch}")
    stopping = EarlyStopping("own_val", patience=1)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=6,
        callbacks=[checkpoint, stopping],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    model = Model()
    trainer.fit(
        model, DataLoader(TensorDataset(X, X @ W), batch_size=4), DataLoader(TensorDataset(XV, XV @ W), batch_size=3)
    )
    record = {
        "files": sorted(os.listdir(out / "ck")),
        "values": model.values,
        "best_score": float(checkpoint.best_model_score),
        "stopped_epoch": stopping.stopped_epoch,
        "current_epoch": trainer.current_epoch,
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
    }
    torch.save(record, out / f"rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[2]))
