"""What each rank evaluates under ``strategy="ddp"`` at 2 CPU processes with Lightning's default
``use_distributed_sampler=True``: ``python evaluation_shares_run.py lightning|trainmesh OUT``.

One launch runs every case of ``CASES`` in order (Lightning's ddp starts the script again as the
second process, which runs them in the same order) and writes each process's record to
``OUT/<case>-rank<r>.pt``: the sample indices of every evaluation step, the metrics the call
returned and ``callback_metrics``, the warnings that name ``DistributedSampler``, and for predict
the predictions it returned. The program's ``test_step`` flattens its batch with
``x.view(x.size(0), -1)``, as a published Lightning program does (an empty batch crashes it).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if sys.argv[1] == "lightning":
    import lightning.pytorch as pl
else:
    import trainmesh as pl


def dataset(n: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 2, 3, generator=g)
    return TensorDataset(torch.arange(n), x, x.sum((1, 2)).unsqueeze(1) + 0.1 * torch.randn(n, 1, generator=g))


class Model(pl.LightningModule):
    def __init__(self, unsynced: bool = False, batchnorm: bool = False, means: bool = False):
        super().__init__()
        self.unsynced = unsynced  # also log the loss without sync_dist (Lightning advises sync_dist)
        self.means = means  # also log a float64 tensor, a number, a sum, with and without sync_dist
        torch.manual_seed(3)
        self.layer = nn.Linear(6, 1)
        # running statistics each rank gathers from its own training share (validated with rank 0's)
        self.norm = nn.BatchNorm1d(6) if batchnorm else nn.Identity()
        self.seen: list[tuple[str, list[int]]] = []

    def _loss(self, stage: str, batch):
        index, x, y = batch
        self.seen.append((stage, index.tolist()))
        x = x.view(x.size(0), -1)
        return F.mse_loss(self.layer(self.norm(x)), y)

    def training_step(self, batch, batch_idx):
        return self._loss("train", batch)

    def validation_step(self, batch, batch_idx):
        loss = self._loss("sanity" if self.trainer.sanity_checking else "val", batch)
        self.log("val_loss", loss, sync_dist=True)
        if self.unsynced:
            self.log("val_plain", loss)

    def test_step(self, batch, batch_idx):
        loss = self._loss("test", batch)
        self.log("test_loss", loss, sync_dist=True)
        if self.means:
            for synced in (True, False):
                end = "" if synced else "_local"
                self.log(f"wide{end}", loss.double() / 3, sync_dist=synced)
                self.log(f"number{end}", loss.item() / 3, sync_dist=synced)
                self.log(f"sum{end}", loss, sync_dist=synced, reduce_fx="sum")
            self.log("local", loss)

    def predict_step(self, batch, batch_idx):
        index, x, _ = batch
        self.seen.append(("predict", index.tolist()))
        return self.layer(x.view(x.size(0), -1))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader(n: int, shuffle: bool = False) -> DataLoader:
    return DataLoader(dataset(n), batch_size=16, shuffle=shuffle, drop_last=shuffle)


CASES = {
    "test_100": dict(call="test", samples=100),  # 7 batches: rank 1 read 3 and an empty one before
    "validate_101": dict(call="validate", samples=101),  # 101 % 2: Lightning repeats sample 0
    "validate_limit": dict(call="validate", samples=100, limit_val_batches=2),
    "fit_sanity": dict(call="fit", samples=101, num_sanity_val_steps=2, limit_train_batches=2, max_epochs=1),
    "validate_unsynced": dict(call="validate", samples=100, unsynced=True),  # val_plain: no sync_dist
    "fit_batchnorm": dict(call="fit", samples=64, batchnorm=True, limit_train_batches=2, max_epochs=1),
    "test_means": dict(call="test", samples=100, means=True),  # epoch means to the bit (uneven batches)
    # shuffled evaluation loaders: Lightning sets their sampler's epoch to the fit's processed epochs
    "fit_shuffled_then_test": dict(call="fit+test", samples=40, max_epochs=2, limit_train_batches=1),
    # a fit without validation, then test: Lightning's first test_step through DDP takes rank 0's running statistics
    "fit_batchnorm_then_test": dict(call="train+test", samples=20, batchnorm=True, limit_train_batches=2, max_epochs=1),
    "predict_33": dict(call="predict", samples=33),  # rank 0: 17 samples in 2 batches, rank 1: 16 in 1
}


def run(
    out: Path,
    case: str,
    call: str,
    samples: int,
    unsynced: bool = False,
    batchnorm: bool = False,
    means: bool = False,
    **settings,
) -> None:
    model = Model(unsynced, batchnorm, means)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **settings,
    )
    record = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if call == "fit":
            trainer.fit(model, loader(64), loader(samples))
        elif call == "fit+test":  # validation in fit, then test, on shuffled loaders
            trainer.fit(model, loader(64, shuffle=True), loader(samples, shuffle=True))
            record["returned"] = trainer.test(model, loader(samples, shuffle=True), verbose=False)
        elif call == "train+test":
            trainer.fit(model, loader(64))
            record["returned"] = trainer.test(model, loader(samples), verbose=False)
        elif call == "predict":
            record["predictions"] = torch.cat(trainer.predict(model, loader(samples)))
        else:
            record["returned"] = getattr(trainer, call)(model, loader(samples), verbose=False)
    record["callback_metrics"] = {k: float(v) for k, v in trainer.callback_metrics.items()}
    record["dtypes"] = {k: str(v.dtype) for k, v in trainer.callback_metrics.items()}
    advice = ("DistributedSampler", "sync_dist=True")
    record["warnings"] = [str(w.message) for w in caught if any(text in str(w.message) for text in advice)]
    record["seen"] = model.seen
    torch.save(record, out / f"{case}-rank{trainer.global_rank}.pt")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for case, settings in CASES.items():
        run(out, case, **settings)


if __name__ == "__main__":
    main(Path(sys.argv[2]))
