"""Leg of test_hang_after_fit: after fit, a collective called on rank 0 only, with
Trainer(watchdog_timeout=TIMEOUT), 2 workers (this script re-runs itself through the elastic agent).

python hang_after_fit_run.py fsdp|ddp OUT_DIR

``fsdp``: the issue's snippet, ``full_tensor()`` of every weight under ``if trainer.is_global_zero:``;
``ddp``: a user's own ``dist.all_reduce`` under ``if trainer.is_global_zero:``. Rank 0 prints
``WAITS <time.time()>`` just before the collective.
"""

import faulthandler
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

TIMEOUT = 3.0  # watchdog_timeout, seconds


class Regression(tm.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-2)


if __name__ == "__main__":
    # A last resort should the watchdog fail: no process of this leg lives past 100 s.
    faulthandler.dump_traceback_later(100, exit=True)
    strategy, out = sys.argv[1], sys.argv[2]
    x = torch.randn(32, 4)
    trainer = tm.Trainer(
        accelerator="cpu",
        strategy=strategy,
        devices=2,
        max_epochs=1,
        watchdog_timeout=TIMEOUT,
        default_root_dir=out,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
    )
    model = Regression()
    trainer.fit(model, DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4))
    if trainer.is_global_zero:
        print(f"WAITS {time.time()}", flush=True)
        if strategy == "fsdp":
            weights = {k: v.full_tensor() for k, v in model.state_dict().items()}  # the line
            torch.save(weights, "final.pt")
        else:
            dist.all_reduce(torch.ones(1))  # the user's own collective, on rank 0 only
    print("SCRIPT ENDED", flush=True)
