"""``python reseed_run.py lightning|trainmesh OUT``: what the generators give inside a run after
``seed_everything`` and draws of the program's own, on one CPU process, under ``strategy="auto"``
then ``strategy="ddp"`` (Lightning's DDP seeds again as each run sets up: ``reset_seed()``), for
fit and then validate. Writes OUT (JSON): each hook's draws (torch, NumPy, ``random``) and the weights."""

import json
import random
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

if sys.argv[1] == "lightning":
    import lightning.pytorch as pl
else:
    import trainmesh as pl


def draws() -> list:
    return [torch.rand(1).item(), float(np.random.random()), random.random()]


class Drawing(pl.LightningModule):
    def __init__(self, seen: list) -> None:
        super().__init__()
        self.layer, self.seen = torch.nn.Linear(4, 1), seen

    def setup(self, stage):
        self.seen.append(["setup", stage, *draws()])

    def training_step(self, batch, batch_idx):
        self.seen.append(["training_step", batch_idx, *draws()])
        return torch.nn.functional.dropout(self.layer(batch[0]), 0.5).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.seen.append(["validation_step", batch_idx, *draws()])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    found = {}
    data = DataLoader(TensorDataset(torch.arange(32.0).reshape(8, 4)), batch_size=4)
    for strategy in ("auto", "ddp"):
        pl.seed_everything(3, verbose=False)
        seen: list = [["before", 0, *draws()]]
        model = Drawing(seen)
        quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
        trainer = pl.Trainer(
            accelerator="cpu", devices=1, strategy=strategy, max_epochs=1, enable_checkpointing=False, **quiet
        )
        trainer.fit(model, data, data)
        draws()  # the program's own draws between the runs
        trainer.validate(model, data, verbose=False)
        found[strategy] = {"seen": seen, "weights": [p.detach().flatten().tolist() for p in model.parameters()]}
    with open(sys.argv[2], "w") as out:
        json.dump(found, out)
