"""StochasticWeightAveraging on a model with batch norm under ``strategy="ddp"``, two CPU processes,
run as its own script: ``python swa_batch_norm_ddp_run.py lightning|trainmesh OUT``. Each rank writes
OUT/rank<r>.pt: its weights and batch-norm buffers, the steps and epochs, its training_step calls of
the forward-only epoch, the SWA state and the logged metrics."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if sys.argv[1] == "lightning":
    import lightning.pytorch as pl
else:
    import trainmesh as pl


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
        self.steps = []

    def training_step(self, batch, batch_idx):
        t = self.trainer
        self.steps.append((t.current_epoch, batch_idx, t.global_step, t.max_epochs, t.num_training_batches))
        loss = F.mse_loss(self.net(batch[0]), batch[1])
        self.log("train_loss", loss, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", F.mse_loss(self.net(batch[0]), batch[1]), sync_dist=True)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


if __name__ == "__main__":
    out = Path(sys.argv[2])
    pl.seed_everything(3)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g)
    train = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    val = DataLoader(TensorDataset(x[:16], y[:16]), batch_size=4)
    model = Model()
    swa = pl.callbacks.StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=2, annealing_epochs=1)
    trainer = pl.Trainer(
        max_epochs=3,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[swa],
    )
    trainer.fit(model, train, val)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(
        dict(
            weights=model.state_dict(),
            end=(trainer.current_epoch, trainer.global_step, trainer.max_epochs),
            extra_epoch=[s for s in model.steps if s[0] == 3],
            swa={k: v for k, v in swa.state_dict().items() if k != "average_model_state"},
            average=swa.state_dict()["average_model_state"],
            logged={k: float(v) for k, v in trainer.logged_metrics.items()},
        ),
        out / f"rank{trainer.global_rank}.pt",
    )
