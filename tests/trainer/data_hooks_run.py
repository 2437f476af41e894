"""Leg of test_data_hooks_ddp: one fit with ddp on two "machines" of one process each, started
as torchrun would start them (RANK, LOCAL_RANK=0, GROUP_RANK, ... set by the test).

python data_hooks_run.py OUT_DIR

The Module's prepare_data runs per machine (the default), the DataModule's once in all
(prepare_data_per_node=False): each call leaves a file in OUT_DIR. The DataModule's
on_before_batch_transfer and the Module's on_after_batch_transfer change every batch; the steps
record what they saw. Each rank writes OUT_DIR/rank<R>.json.
"""

import faulthandler
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

N = 8  # samples: 2 batches of 2 per rank


def dataset():
    x = torch.arange(N, dtype=torch.float32).unsqueeze(1)
    return TensorDataset(x, 3 * x)


class Data(tm.DataModule):
    def __init__(self, out):
        super().__init__()
        self.out = out
        self.prepare_data_per_node = False  # once in all, on global rank 0

    def prepare_data(self):
        open(os.path.join(self.out, f"datamodule-prepare-rank{self.trainer.global_rank}"), "w").close()

    def on_before_batch_transfer(self, batch, dataloader_idx):
        x, y = batch
        return x + 100 * dataloader_idx, y

    def train_dataloader(self):
        return DataLoader(dataset(), batch_size=2)

    def val_dataloader(self):
        return [DataLoader(dataset(), batch_size=2), DataLoader(dataset(), batch_size=2)]


class Net(tm.Module):
    def __init__(self, out):
        super().__init__()
        self.out = out
        self.layer = torch.nn.Linear(1, 1)
        self.seen = {"train": [], "val": []}

    def prepare_data(self):  # per machine: both ranks here are local rank 0
        open(os.path.join(self.out, f"module-prepare-rank{self.trainer.global_rank}"), "w").close()

    def on_after_batch_transfer(self, batch, dataloader_idx):
        x, y = batch
        return -x, y

    def training_step(self, batch, batch_idx):
        self.seen["train"].append(batch[0].flatten().tolist())
        return F.mse_loss(self.layer(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        if not self.trainer.sanity_checking:
            self.seen["val"].append([dataloader_idx, batch[0].flatten().tolist()])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    faulthandler.dump_traceback_later(120, exit=True)
    out = sys.argv[1]
    torch.manual_seed(0)
    model = Net(out)
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        num_nodes=2,
        strategy="ddp",
        max_epochs=1,
        num_sanity_val_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=Data(out))
    weights = [p.detach().flatten().tolist() for p in model.parameters()]
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump({"seen": model.seen, "weights": weights, "local_rank": trainer.local_rank}, f)
