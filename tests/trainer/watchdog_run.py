"""Leg of test_watchdog: a fit with Trainer(watchdog_timeout=TIMEOUT) whose first epoch is
slow in the ways the watchdog must let pass (a first step, a validation and a checkpoint save
each longer than the timeout), and whose rank STUCK then sleeps forever in training_step.

python watchdog_run.py ddp|single OUT_DIR

``ddp``: 2 workers (this script re-runs itself through the elastic agent), rank 1 sticks;
``single``: one process, which sticks. The stuck rank prints ``STALL <time.time()>`` first.
"""

import faulthandler
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

TIMEOUT = 2.0  # watchdog_timeout, seconds


class SlowThenStuck(tm.Module):
    def __init__(self, stuck_rank: int):
        super().__init__()
        self.stuck_rank = stuck_rank
        self.saved = False
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        if self.current_epoch == 0 and batch_idx == 0:
            time.sleep(1.2 * TIMEOUT)  # a slow first step (compilation): it has 3x the timeout
        if self.current_epoch == 1 and batch_idx == 1 and self.global_rank == self.stuck_rank:
            print(f"STALL {time.time()}", flush=True)
            time.sleep(3600)  # the stuck rank
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        time.sleep(0.4 * TIMEOUT)  # 3 of them: a validation longer than the timeout, fed per step
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x), y))

    def on_save_checkpoint(self, checkpoint):
        if self.current_epoch == 0 and not self.saved:
            time.sleep(1.2 * TIMEOUT)  # a slow save: the watchdog is paused
        self.saved = True

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    # A last resort should the watchdog fail: no process of this leg lives past 100 s.
    faulthandler.dump_traceback_later(100, exit=True)
    mode, out = sys.argv[1], sys.argv[2]
    x = torch.randn(64, 4)
    data = TensorDataset(x, x.sum(1, keepdim=True))
    devices, stuck = (2, 1) if mode == "ddp" else (1, 0)
    trainer = tm.Trainer(
        accelerator="cpu",
        strategy="ddp" if mode == "ddp" else "auto",
        devices=devices,
        max_epochs=2,
        limit_train_batches=4,
        limit_val_batches=3,
        num_sanity_val_steps=0,
        watchdog_timeout=TIMEOUT,
        default_root_dir=out,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
    )
    trainer.fit(SlowThenStuck(stuck), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4))
    print("FIT ENDED", flush=True)
