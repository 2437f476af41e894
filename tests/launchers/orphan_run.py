"""Leg of test_orphans: a ddp fit (2 workers, started by the elastic agent this script becomes)
that would run for hours. Each worker writes OUT.rank{r} with its pid (and its parent's) once
training has started; the test then kills the agent and watches the workers.

python orphan_run.py OUT
"""

import faulthandler
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm


class Tiny(tm.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)


class WritePid(tm.Callback):
    def __init__(self, out: str):
        self.out = out

    def on_train_start(self, trainer, module):
        path = f"{self.out}.rank{trainer.global_rank}"
        with open(path + ".tmp", "w") as file:
            json.dump({"pid": os.getpid(), "ppid": os.getppid()}, file)
        os.replace(path + ".tmp", path)  # the test never reads half a file


if __name__ == "__main__":
    # A last resort should the test's own cleanup fail: no process of this leg lives past 120 s.
    faulthandler.dump_traceback_later(120, exit=True)
    out = sys.argv[1]
    x = torch.randn(64, 4)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    trainer = tm.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=2,
        max_epochs=1_000_000,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        callbacks=[WritePid(out)],
    )
    trainer.fit(Tiny(), loader)
