"""The processes of test_full_state_dict.py: fit, then Trainer.full_state_dict() and
Trainer.save_checkpoint(path) called on every rank, under each LAYOUT given, one after another in
the same processes (one launch, one process group).

python full_state_run.py OUT_DIR LAYOUT [LAYOUT ...]     LAYOUT: single | ddp | fsdp | tp | pp_1f1b

Rank 0 writes OUT_DIR/LAYOUT.pt ({"full": what full_state_dict returned}); every other rank writes
OUT_DIR/LAYOUT.rankN with the repr of what it got. The checkpoint goes to OUT_DIR/LAYOUT.ckpt (a
file, or a distributed checkpoint directory where the strategy shards). The model, the data and the
global batch (16) are model_parallel_run.py's, so every layout trains the weights one process does.
"""

import faulthandler
import sys
from pathlib import Path

import torch
from model_parallel_run import GLOBAL_BATCH, LAYOUTS, Net, dataset
from torch.utils.data import DataLoader

import trainmesh as tm


def run_leg(out: Path, layout: str) -> None:
    devices, strategy = LAYOUTS[layout]
    dp = 2 if layout in ("ddp", "fsdp") else 1
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy(),
        max_epochs=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        default_root_dir=str(out),
    )
    loader = DataLoader(dataset(), batch_size=GLOBAL_BATCH // dp)
    if layout == "single":
        # The layouts' step k: the samples the Trainer's shuffling sampler deals their ranks (seed 0)
        from helpers.lightning_order import GlobalBatches

        order = GlobalBatches(len(loader.dataset), world=1, batch_size=GLOBAL_BATCH)
        loader = DataLoader(loader.dataset, batch_size=GLOBAL_BATCH, sampler=order)
    trainer.fit(Net(), loader)
    full = trainer.full_state_dict()  # every rank: a collective where the model is sharded or split
    trainer.save_checkpoint(out / f"{layout}.ckpt")  # every rank, too
    if trainer.is_global_zero:
        torch.save({"full": full}, out / f"{layout}.pt")
    else:
        (out / f"{layout}.rank{trainer.global_rank}").write_text(repr(full))


if __name__ == "__main__":
    faulthandler.dump_traceback_later(240, exit=True)  # a hang ends the launch
    out = Path(sys.argv[1])
    for layout in sys.argv[2:]:
        run_leg(out, layout)
