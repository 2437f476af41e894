"""What each rank trains on under ``strategy="ddp"`` at 2 CPU processes with Lightning's default
``use_distributed_sampler=True``: ``python sampler_ddp_run.py lightning|trainmesh OUT``.

One launch runs every case of ``CASES`` in order (Lightning's ddp starts the script again as the
second process, which runs them in the same order) and writes each process's record to
``OUT/<case>-rank<r>.pt``: the sample indices of every training step and the trained weights.
The first case runs before any ``seed_everything`` (the sampler's seed is then 0); the rest after
``seed_everything(17)``. ``resumed`` is a fit that saves after its second step and a new fit from
that checkpoint (the second fit's record). ``combined`` trains on a dict of two loaders (32 and 13
samples), each sharded by its own sampler; its record holds both loaders' indices each step. trainmesh also runs ``TRAINMESH_ONLY`` (other data-parallel strategies,
whose Lightning counterparts share ddp's sampler) in the same process group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

if sys.argv[1] == "lightning":
    import lightning.pytorch as pl
elif sys.argv[1] == "lightning1":  # pytorch-lightning 1.9.5 (helpers/record_lightning_1_9_sampler_ddp.py)
    import pytorch_lightning as pl
else:
    import trainmesh as pl

SAMPLES = 32
_gen = torch.Generator().manual_seed(0)
X = torch.randn(SAMPLES, 3, generator=_gen)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1 * torch.randn(SAMPLES, 1, generator=_gen)
DATA = TensorDataset(torch.arange(SAMPLES), X, Y)


class EveryThirdFirst(Sampler[int]):
    """A sampler of one's own: indices 0, 3, 6, ..., then 1, 4, ..., then 2, 5, ...; 30 of the 32."""

    def __iter__(self):
        return iter([i for start in range(3) for i in range(start, 30, 3)])

    def __len__(self):
        return 30


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 1)
        self.seen = []
        self.lr = 0.1  # where a LearningRateFinder puts its suggestion

    def training_step(self, batch, batch_idx):
        if isinstance(batch, dict):  # "combined": both loaders' batches, read together
            self.seen.append((self.current_epoch, [batch["a"][0].tolist(), batch["b"][0].tolist()]))
            return sum(F.mse_loss(self.layer(x), y) for _, x, y in batch.values())
        index, x, y = batch
        self.seen.append((self.current_epoch, index.tolist()))
        return F.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Lightning1Model(Model):
    """A module written for pytorch-lightning 1.x (it defines ``training_epoch_end``, which 2.0 removed),
    whose shuffled validation loader's indices are recorded too (the sanity check's included)."""

    def __init__(self):
        super().__init__()
        self.seen_val = []

    def validation_step(self, batch, batch_idx):
        index, x, y = batch
        self.seen_val.append((self.current_epoch, index.tolist()))
        loss = F.mse_loss(self.layer(x), y)
        self.log("val_loss", loss)  # not synced: each rank's own value, in its own checkpoint name
        return loss

    def training_epoch_end(self, outputs):
        pass


class Lightning1UnusedHead(Lightning1Model):
    """A 1.x module with a head its loss never reads: 1.9.5's ddp sets ``find_unused_parameters=True``
    when the program does not, so it trains (Lightning 2.x's default, False, stops it)."""

    def __init__(self):
        super().__init__()
        self.aux_head = nn.Linear(3, 1)


def loader(kind: str) -> DataLoader | dict[str, DataLoader]:
    if kind == "combined":  # Lightning reads a dict as CombinedLoader(mode="max_size_cycle"); 13 pads to 14
        few = TensorDataset(*DATA[:13])
        return {"a": DataLoader(DATA, batch_size=4, shuffle=True), "b": DataLoader(few, batch_size=3, shuffle=True)}
    if kind == "in_order":
        return DataLoader(DATA, batch_size=4)
    if kind == "shuffled":
        return DataLoader(DATA, batch_size=4, shuffle=True)
    return DataLoader(DATA, batch_size=4, sampler=EveryThirdFirst())


CASES = {
    "unseeded_in_order": dict(data="in_order"),
    "in_order": dict(data="in_order"),
    "shuffled": dict(data="shuffled"),
    "own_sampler": dict(data="own_sampler"),
    "overfit": dict(data="shuffled", overfit_batches=2),
    "combined": dict(data="combined"),
    "lr_find": dict(data="shuffled", lr_find=True),
    "resumed": dict(data="shuffled"),
}
# Lightning 2.6 refuses a 1.x module: pytorch-lightning 1.9.5's ranks read these (recorded as data)
LIGHTNING1 = {
    "lightning1_shuffled": dict(data="shuffled"),
    "lightning1_unused_head": dict(data="shuffled", unused_head=True),
}
TRAINMESH_ONLY = {
    "fsdp_in_order": dict(data="in_order", strategy="fsdp"),
    "zero1_shuffled": dict(data="shuffled", strategy="zero1"),
}


def fit(
    data: str,
    strategy: str = "ddp",
    ckpt_path: Path | None = None,
    lightning1: bool = False,
    lr_find: bool = False,
    unused_head: bool = False,
    **settings,
) -> tuple[Model, pl.Trainer]:
    torch.manual_seed(3)  # the weights: the same in both frameworks without moving the sampler's seed
    model = (Lightning1UnusedHead() if unused_head else Lightning1Model()) if lightning1 else Model()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        max_epochs=2,
        logger=False,
        enable_checkpointing="callbacks" in settings,
        enable_progress_bar=False,
        enable_model_summary=False,
        # a range test of 6 steps on each rank, as Lightning runs it: rank 0's results, the suggestion set
        **(dict(callbacks=[pl.callbacks.LearningRateFinder(num_training_steps=6)]) if lr_find else {}),
        **settings,
    )
    # the 1.x module also validates on a shuffled loader of 10 samples (padded to 5 a rank, batch 3)
    val = DataLoader(TensorDataset(*DATA[:10]), batch_size=3, shuffle=True) if lightning1 else None
    trainer.fit(model, loader(data), val, ckpt_path=ckpt_path)
    return model, trainer


def run(out: Path, case: str, data: str, **settings) -> None:
    if case == "resumed":
        # A fit that writes a checkpoint after its second step (of 4 an epoch), then a new fit from it
        saves = pl.callbacks.ModelCheckpoint(out / "steps", filename="{step}", every_n_train_steps=2, save_top_k=-1)
        fit(data, callbacks=[saves])
        model, trainer = fit(data, ckpt_path=out / "steps" / "step=2.ckpt")
    elif case in LIGHTNING1:
        # Each rank names its best file from its own val_loss (the file written is rank 0's)
        best = pl.callbacks.ModelCheckpoint(out / case, filename="{epoch}-{val_loss:.4f}", monitor="val_loss")
        model, trainer = fit(data, lightning1=True, callbacks=[best], **settings)
    else:
        model, trainer = fit(data, **settings)
    # Whole tensors (a DTensor under fsdp: full_tensor is a collective, which every rank runs)
    weights = {k: getattr(v, "full_tensor", v.detach)().clone() for k, v in model.layer.state_dict().items()}
    record = dict(seen=model.seen, weights=weights, seen_val=getattr(model, "seen_val", None), lr=model.lr)
    if case in LIGHTNING1:
        record["best"] = Path(trainer.checkpoint_callback.best_model_path).name
    torch.save(record, out / f"{case}-rank{trainer.global_rank}.pt")


def main(framework: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cases = dict(CASES, **(TRAINMESH_ONLY if framework == "trainmesh" else {}))
    if framework != "lightning":
        cases = LIGHTNING1 if framework == "lightning1" else dict(cases, **LIGHTNING1)
    for case, settings in cases.items():
        if case in ("in_order", *LIGHTNING1):
            pl.seed_everything(17)
        run(out, case, **settings)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
