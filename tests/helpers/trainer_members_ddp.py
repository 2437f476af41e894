"""The trainer-members program (trainer_members.py) under ``strategy="ddp"`` on 2 CPU processes.

``python trainer_members_ddp.py FRAMEWORK OUT`` runs every case in ``CASES`` with one launch
(Lightning's and trainmesh's ddp both start the script again as the second process, which runs
the cases in the same order) and writes each process's record to ``OUT/<case>-rank<r>.pt``:
what the callback read at each hook, the samples each training step got, and the weights. Each
rank also records ``is_shared_filesystem`` for a folder every rank shares and for one per rank.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.trainer_members import run  # noqa: E402

CASES = {
    "fit_test_onecycle": dict(
        max_epochs=2,
        limit_val_batches=2,
        onecycle=True,
        accumulate_grad_batches=3,
        stages=("fit", "test"),
        loggers=True,
        log_every_n_steps=1,
        callbacks=("lr_monitor",),
    ),
    "no_distributed_sampler": dict(max_epochs=1, limit_val_batches=1, use_distributed_sampler=False),
    # local_head: parameters and a buffer the module keeps out of DDP's sync (differ by rank, as Lightning's)
    "own_sampler": dict(
        max_epochs=2, limit_val_batches=1, use_distributed_sampler=False, data="own_sampler", local_head=True
    ),
}


def main(framework: str, out: Path) -> None:
    for case, settings in CASES.items():
        root = out / framework / case
        record = run(framework, root, strategy="ddp", devices=2, shared_filesystem=True, **settings)
        torch.save(record, out / f"{framework}-{case}-rank{record['rank']}.pt")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
