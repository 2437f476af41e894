"""Leg of test_corrupt_checkpoints: a ddp fit (2 workers, started by the elastic agent this script
becomes) whose disk is full when the first checkpoint is written: every fsync fails with ENOSPC,
as it does on a full disk (file systems that allocate late, NFS, report it there).

python disk_full_run.py CHECKPOINT_DIR
"""

import errno
import faulthandler
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


def full_disk(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


if __name__ == "__main__":
    faulthandler.dump_traceback_later(120, exit=True)  # a last resort: no process of this leg lives past 120 s
    folder = sys.argv[1]
    if "TORCHELASTIC_RUN_ID" in os.environ:  # the workers only: the agent itself writes nothing
        os.fsync = full_disk
    x = torch.randn(32, 4)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    trainer = tm.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=2,
        max_steps=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        callbacks=[tm.callbacks.ModelCheckpoint(dirpath=folder, every_n_train_steps=1)],
    )
    trainer.fit(Tiny(), loader)
