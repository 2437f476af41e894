"""One leg of the ckpt_path="last" test for fsdp's checkpoints, run as its own program.

python last_dirs_run.py ROOT OUT STRATEGY STEPS [last]
  STRATEGY: fsdp (its default: one file of whole tensors) or fsdp-sharded (state_dict_type="sharded":
  a distributed checkpoint, a directory). Train on 2 CPU processes with ModelCheckpoint(save_last=True) under ROOT up to global step STEPS;
  with "last", fit(ckpt_path="last"). Rank 0 saves to OUT the full weights and global step at the
  start of training (after any resume) and at the end.
python last_dirs_run.py --batch SPEC.json  -> several legs in one launch, one after another
"""

import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.models import quiet_trainer  # noqa: E402
from trainmesh.callbacks import ModelCheckpoint  # noqa: E402
from trainmesh.strategies import FSDPStrategy  # noqa: E402

STRATEGIES = {"fsdp": lambda: "fsdp", "fsdp-sharded": lambda: FSDPStrategy(state_dict_type="sharded")}


class Wide(tm.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(11)
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class Record(tm.Callback):
    """Full weights and step when training starts (after a resume has loaded) and when it ends."""

    def __init__(self):
        self.seen = {}

    def _keep(self, trainer, module, when):
        state = trainer.runtime.state_dicts(trainer.model, [])["model"]  # collective
        self.seen[when] = {"step": trainer.global_step, "state_dict": {k: v.detach().clone() for k, v in state.items()}}

    def on_train_start(self, trainer, module):
        self._keep(trainer, module, "start")

    def on_train_end(self, trainer, module):
        self._keep(trainer, module, "end")


def main(argv: list[str]) -> None:
    root, out, strategy, steps = argv[0], argv[1], argv[2], int(argv[3])
    resume = len(argv) > 4 and argv[4] == "last"
    g = torch.Generator().manual_seed(3)
    x = torch.randn(256, 16, generator=g)
    data = DataLoader(TensorDataset(x, x[:, :4].argmax(1)), batch_size=8)
    record = Record()
    trainer = quiet_trainer(
        strategy=STRATEGIES[strategy](),
        devices=2,
        max_steps=steps,
        default_root_dir=root,
        enable_checkpointing=True,
        callbacks=[ModelCheckpoint(save_last=True, every_n_train_steps=2), record],
    )
    trainer.fit(Wide(), data, ckpt_path="last" if resume else None)
    if trainer.is_global_zero:
        torch.save(record.seen, out)


if __name__ == "__main__":
    if sys.argv[1] == "--batch":  # several legs in one launch, one after another (tests/helpers/batches.py)
        from helpers.batches import run_batch

        run_batch(sys.argv[2], main, limit=240)
    else:
        main(sys.argv[1:])
