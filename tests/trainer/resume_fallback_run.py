"""One leg of the fallback test (test_resume_fallback.py), run as its own program.

python resume_fallback_run.py ROOT OUT STEPS CKPT_PATH
  Train on 2 CPU processes with fsdp, keeping a checkpoint (a directory) every 2 steps under
  ROOT/ckpts, up to global step STEPS, from CKPT_PATH ("none": a fresh start, "last", or a path).
  Rank 0 saves to OUT the full weights and global step when training starts and when it ends.
python resume_fallback_run.py --batch SPEC.json  -> several legs in one launch, one after another
"""

import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from last_dirs_run import Record, Wide  # noqa: E402

from helpers.models import quiet_trainer  # noqa: E402
from trainmesh.callbacks import ModelCheckpoint  # noqa: E402
from trainmesh.strategies import FSDPStrategy  # noqa: E402


def main(argv: list[str]) -> None:
    root, out, steps, ckpt_path = argv[0], argv[1], int(argv[2]), argv[3]
    g = torch.Generator().manual_seed(3)
    x = torch.randn(256, 16, generator=g)
    data = DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=8)
    record = Record()
    trainer = quiet_trainer(
        strategy=FSDPStrategy(state_dict_type="sharded"),  # distributed checkpoints: a shard per rank
        devices=2,
        max_steps=steps,
        default_root_dir=root,
        exact_resume=True,  # the named resume and the restart alike continue exactly
        enable_checkpointing=True,
        callbacks=[
            ModelCheckpoint(dirpath=os.path.join(root, "ckpts"), save_top_k=-1, every_n_train_steps=2),
            record,
        ],
    )
    trainer.fit(Wide(), data, ckpt_path=None if ckpt_path == "none" else ckpt_path)
    if trainer.is_global_zero:
        torch.save(record.seen, out)


if __name__ == "__main__":
    if sys.argv[1] == "--batch":  # several legs in one launch, one after another (tests/helpers/batches.py)
        from helpers.batches import run_batch

        run_batch(sys.argv[2], main, limit=240)
    else:
        main(sys.argv[1:])
