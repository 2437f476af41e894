"""The campaign's DDP program (issue 36), run as its own script: ``python ddp_program_run.py
lightning|trainmesh OUT``. Two CPU processes under ``strategy="ddp"``: ``sync_dist`` logging,
``self.all_gather`` in ``on_validation_epoch_end``, a value rank 0 logs alone
(``rank_zero_only=True``), ``self.global_rank`` and ``trainer.world_size``. Rank 0 writes
OUT/outcome.pt: the metric dictionaries, metrics.csv's rows, what each rank gathered, the weights."""

import csv
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if sys.argv[1] == "lightning":
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import CSVLogger
else:
    import trainmesh as pl
    from trainmesh.loggers import CSVLogger


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.val_outputs, self.gathered = [], []

    def training_step(self, batch, batch_idx):
        loss = F.mse_loss(self.layer(batch[0]), batch[1])
        self.log("train_loss", loss, sync_dist=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = F.mse_loss(self.layer(batch[0]), batch[1])
        self.val_outputs.append(loss)
        self.log("val_loss", loss, sync_dist=True)

    def on_validation_epoch_end(self):
        everyone = self.all_gather(torch.stack(self.val_outputs).mean())
        # Their mean only: each rank's share of the validation set differs on purpose (trainmesh's
        # evaluation shards are contiguous, Lightning's DistributedSampler interleaves the samples)
        self.gathered.append((self.global_rank, self.trainer.world_size, list(everyone.shape), everyone.mean()))
        if self.trainer.is_global_zero:
            self.log("val_gathered_mean", everyone.mean(), rank_zero_only=True)
        self.val_outputs.clear()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    pl.seed_everything(17)
    x = torch.randn(32, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    train = DataLoader(TensorDataset(x[:24], y[:24]), batch_size=4, shuffle=True)
    val = DataLoader(TensorDataset(x[24:], y[24:]), batch_size=2)
    model = Model()
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=CSVLogger(out, name="logs", version=0),
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        log_every_n_steps=2,
    )
    trainer.fit(model, train, val)
    if trainer.is_global_zero:
        trainer.logger.save()
        with (out / "logs" / "version_0" / "metrics.csv").open(newline="") as file:
            rows = [{k: v for k, v in r.items() if v != ""} for r in csv.DictReader(file)]
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        torch.save(
            dict(callback=metrics, rows=rows, gathered=model.gathered, weights=model.state_dict()), out / "outcome.pt"
        )


if __name__ == "__main__":
    main(Path(sys.argv[2]))
