"""One leg of the stop-and-resume test, run in its own process.

python resume_run.py full OUT                 -> train to the end, save final weights to OUT
python resume_run.py stop OUT CKPT BATCH      -> save a checkpoint after training batch BATCH
                                                  (counted over the whole run), then die hard
python resume_run.py resume OUT CKPT          -> resume from CKPT, train to the end, save weights
python resume_run.py pause OUT CKPT STEPS HOW  -> fit(max_steps=STEPS) to its normal end, then keep
                                                  the checkpoint HOW says: "trainer" (save_checkpoint
                                                  after fit) or "last" (ModelCheckpoint's last.ckpt)
Options via env: ACCUMULATE, WORKERS, EPOCHS, SCHED (step|epoch), MAX_STEPS (the full and resumed
runs stop on max_steps instead of max_epochs).
python resume_run.py --batch SPEC.json        -> several full, pause or resume legs of one world size
                                                  in one launch, one after another, each with its own
                                                  environment (see tests/helpers/batches.py)
"""

import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.models import DropoutNet, loaders, quiet_trainer  # noqa: E402
from trainmesh.callbacks import ModelCheckpoint  # noqa: E402


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


class CountBatches(tm.Callback):
    """How many training batches this process ran (a resume must run exactly the rest)."""

    def __init__(self):
        self.count = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.count += 1


def main(argv: list[str]) -> None:
    """One leg: ``argv`` is the command line after the program (MODE OUT ...)."""
    mode, out = argv[0], argv[1]
    tm.seed_everything(1234)
    workers = int(os.environ.get("WORKERS", "0"))
    train, val = loaders(batch_size=8, shuffle=True, num_workers=workers)
    model = DropoutNet(scheduler_interval=os.environ.get("SCHED", "step"))
    counter = CountBatches()
    callbacks = [counter]
    if mode == "stop":
        callbacks.append(DieAfter(argv[2], int(argv[3]), len(train)))
    keep_last = mode == "pause" and argv[4] == "last"
    if mode == "pause":
        length = {"max_steps": int(argv[3])}
        if keep_last:
            # A save at the stopping step: as Lightning 2.6's, last.ckpt is written only beside a save, and
            # max_steps ending mid-epoch is no save point (no validation ran at that step).
            folder = os.path.join(os.path.dirname(out), "checkpoints")
            callbacks.append(ModelCheckpoint(dirpath=folder, save_last=True, every_n_train_steps=int(argv[3])))
    elif "MAX_STEPS" in os.environ:
        length = {"max_steps": int(os.environ["MAX_STEPS"])}
    else:
        length = {"max_epochs": int(os.environ.get("EPOCHS", "3"))}
    trainer = quiet_trainer(
        **length,
        callbacks=callbacks,
        enable_checkpointing=keep_last,
        strategy=os.environ.get("STRATEGY", "auto"),
        devices=int(os.environ.get("DEVICES", "1")),
        accumulate_grad_batches=int(os.environ.get("ACCUMULATE", "1")),
        val_check_interval=0.5,
        exact_resume=True,  # resumed == the run that never stopped (a named ckpt_path resumes as Lightning)
    )
    trainer.fit(model, train, val, ckpt_path=argv[2] if mode == "resume" else None)
    if mode == "pause":
        if not keep_last:
            trainer.save_checkpoint(argv[2])
        elif trainer.is_global_zero:
            shutil.copy(trainer.checkpoint_callback.last_model_path, argv[2])
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": model.state_dict(),
                "metrics": trainer.callback_metrics,
                "global_step": trainer.global_step,
                "batches_run": counter.count,
            },
            out,
        )


if __name__ == "__main__":
    if sys.argv[1] == "--batch":
        from helpers.batches import run_batch

        run_batch(sys.argv[2], main, limit=120)
    else:
        main(sys.argv[1:])
