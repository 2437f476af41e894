"""Leg of test_corrupt_checkpoints: a fit of 2 workers (started by the elastic agent this script
becomes) whose disk fills up.

python disk_full_run.py CHECKPOINT_DIR          ddp: every fsync fails with ENOSPC, as it does on a
                                                full disk (file systems that allocate late, NFS, report it there)
python disk_full_run.py CHECKPOINT_DIR fsdp     fsdp (a distributed checkpoint) on a real small file
                                                system the test mounted: the first checkpoint fits, the second not
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
    def __init__(self, width=4, out=1):
        super().__init__()
        self.net = torch.nn.Linear(width, out)

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
    fsdp = sys.argv[2:] == ["fsdp"]
    if "TORCHELASTIC_RUN_ID" in os.environ and not fsdp:  # the workers only: the agent itself writes nothing
        os.fsync = full_disk
    width, out = (256, 256) if fsdp else (4, 1)  # fsdp: 256 KiB of weights per checkpoint
    x = torch.randn(32, width)
    loader = DataLoader(TensorDataset(x, x[:, :out]), batch_size=8)
    trainer = tm.Trainer(
        accelerator="cpu",
        strategy=tm.strategies.FSDPStrategy(state_dict_type="sharded") if fsdp else "ddp",  # a distributed checkpoint
        devices=2,
        max_steps=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        callbacks=[tm.callbacks.ModelCheckpoint(dirpath=folder, every_n_train_steps=1)],
    )
    trainer.fit(Tiny(width, out), loader)
