"""The processes of test_pipeline_callbacks.py: a 2-stage pipeline with callbacks and a logger
that decide from what only the last stage computes.

python pipeline_callbacks_run.py OUT_DIR
Each rank writes OUT_DIR/rank{R}.json: the epoch it stopped at, its callback_metrics, the best
checkpoint ModelCheckpoint chose and the step-level train_loss values it saw.
"""

import faulthandler
import json
import os
import sys

from model_parallel_run import GLOBAL_BATCH, Net, dataset
from torch.utils.data import DataLoader

import trainmesh as tm
from trainmesh.callbacks import EarlyStopping, ModelCheckpoint
from trainmesh.loggers import CSVLogger
from trainmesh.strategies import ModelParallelStrategy


class RecordStepLoss(tm.Callback):
    def __init__(self):
        self.seen = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        value = trainer.callback_metrics.get("train_loss_step")  # a tensor: .item() for the JSON report
        self.seen.append(None if value is None else value.item())


def main():
    faulthandler.dump_traceback_later(200, exit=True)
    out = sys.argv[1]
    record = RecordStepLoss()
    # min_delta larger than any improvement: the first epoch sets the best value, the second
    # does not beat it, and EarlyStopping(patience=0) stops the run there, on every rank alike.
    stopper = EarlyStopping(monitor="val_loss", patience=0, min_delta=10.0, mode="min")
    best = ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), monitor="val_loss", save_top_k=1, mode="min")
    # Defaults otherwise: a sanity check (validation before training), the progress bar, the summary.
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=2,
        max_epochs=5,
        log_every_n_steps=1,
        strategy=ModelParallelStrategy(pp=2, dp_shard=1, schedule="1F1B", microbatches=4),
        callbacks=[record, stopper, best],
        logger=CSVLogger(out, name="logs"),
    )
    trainer.fit(Net(), DataLoader(dataset(), batch_size=GLOBAL_BATCH), DataLoader(dataset(40, seed=1), batch_size=8))
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump(
            {
                "epoch": trainer.current_epoch,
                "step": trainer.global_step,
                "stopped": trainer.should_stop,
                "metrics": {k: v.item() for k, v in trainer.callback_metrics.items()},
                "best": best.best_model_path,
                "step_losses": record.seen,
                "log_dir": trainer.log_dir,
            },
            f,
        )


if __name__ == "__main__":
    main()
