"""One leg of the stop-and-resume test, run in its own process.

python resume_run.py full OUT                 -> train to the end, save final weights to OUT
python resume_run.py stop OUT CKPT BATCH      -> save a checkpoint after training batch BATCH
                                                  (counted over the whole run), then die hard
python resume_run.py resume OUT CKPT          -> resume from CKPT, train to the end, save weights
Options via env: ACCUMULATE, WORKERS, EPOCHS, SCHED (step|epoch).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.models import DropoutNet, loaders, quiet_trainer  # noqa: E402


class DieAfter(tm.Callback):
    """Checkpoint at a loop position, then end the process without any cleanup (a crash)."""

    def __init__(self, path: str, batch: int, batches_per_epoch: int):
        self.path, self.batch, self.per_epoch = path, batch, batches_per_epoch
        self.seen = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.seen += 1
        if self.seen == self.batch and self.seen % self.per_epoch != 0:
            self._die(trainer)

    def on_train_epoch_end(self, trainer, module):
        if self.seen == self.batch:
            self._die(trainer)

    def _die(self, trainer):
        trainer.save_checkpoint(self.path)
        os._exit(17)


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    tm.seed_everything(1234)
    workers = int(os.environ.get("WORKERS", "0"))
    train, val = loaders(batch_size=8, shuffle=True, num_workers=workers)
    model = DropoutNet(scheduler_interval=os.environ.get("SCHED", "step"))
    callbacks = []
    if mode == "stop":
        callbacks.append(DieAfter(sys.argv[3], int(sys.argv[4]), len(train)))
    trainer = quiet_trainer(max_epochs=int(os.environ.get("EPOCHS", "3")), callbacks=callbacks,
                            strategy=os.environ.get("STRATEGY", "auto"), devices=int(os.environ.get("DEVICES", "1")),
                            accumulate_grad_batches=int(os.environ.get("ACCUMULATE", "1")),
                            val_check_interval=0.5)
    trainer.fit(model, train, val, ckpt_path=sys.argv[3] if mode == "resume" else None)
    if trainer.is_global_zero:
        torch.save({"state_dict": model.state_dict(), "metrics": trainer.callback_metrics,
                    "global_step": trainer.global_step}, out)


if __name__ == "__main__":
    main()
