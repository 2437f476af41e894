"""The program of test_results_sync_dist_step.py: FRAMEWORK's Trainer(strategy="ddp_fork", devices=2)
fits SyncedSteps, each rank logging its own numbers with sync_dist=True and every reduce_fx (and in the
epoch-start hooks, read back in the epoch-end hooks); the
parent's ``trainer.callback_metrics`` (rank 0's, sent back by the launcher) go to OUT as JSON.

python results_sync_dist_step_run.py lightning|trainmesh OUT
"""

import json
import sys
import warnings

import torch
from torch.utils.data import DataLoader, TensorDataset


class SyncedSteps:
    """Each rank logs its own numbers at each step, synced with each reduction."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        rank = self.trainer.global_rank
        for fx in ("sum", "mean", "max", "min"):
            self.log(f"step_{fx}", 1.0 + rank, on_step=True, on_epoch=False, sync_dist=True, reduce_fx=fx)
            self.log(f"both_{fx}", batch_idx + 2.0 * rank, on_step=True, on_epoch=True, sync_dist=True, reduce_fx=fx)
        # float16 1 + 2**-10 and 1: Lightning reduces in float32 (1.00048828125); a float16 sum rounds to 2, mean 1
        half = torch.tensor(1.0 + (rank == 0) * 2.0**-10, dtype=torch.float16)
        self.log("step_f16", half, on_step=True, on_epoch=False, sync_dist=True)
        self.log("step_bf16", half.bfloat16() * (rank + 1), on_step=True, on_epoch=False, sync_dist=True)
        # a group holding every process (torch's WORLD, or new_group of both ranks) reduces as no group does
        self.log("group_sum", 1.0 + rank, sync_dist=True, sync_dist_group=self.everyone, reduce_fx="sum", on_epoch=True)
        self.log(
            "world_max",
            1.0 + rank,
            on_step=True,
            sync_dist=True,
            sync_dist_group=torch.distributed.group.WORLD,
            reduce_fx="max",
        )
        # a group of rank 0 alone: rank 0 reduces over itself, rank 1 (outside it) keeps its own value
        self.log("first_sum", 1.0 + rank, sync_dist=True, sync_dist_group=self.first, reduce_fx="sum", on_epoch=True)
        self.log("first_max", 1.0 + 2.0 * rank, sync_dist=True, sync_dist_group=self.first, reduce_fx="max")
        return self.layer(batch[0]).pow(2).mean()

    def setup(self, stage):
        self.everyone = torch.distributed.new_group([0, 1])  # every rank creates it, as torch asks
        self.first = torch.distributed.new_group([0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 2, generator=torch.Generator().manual_seed(0))), batch_size=2)

    # What an epoch-start hook logs, read back in that epoch's end hook (reduced where synced)
    def on_train_epoch_start(self):
        self.log("opened_sum", 1.0 + self.trainer.global_rank, sync_dist=True, reduce_fx="sum")

    def on_train_epoch_end(self):
        self.log("seen_opened_sum", float(self.trainer.callback_metrics.get("opened_sum", -1.0)))
        # each rank's view of the rank-0 group (its metrics, strategy.reduce, all_gather), shown on rank 0
        rank, seen, strategy = self.trainer.global_rank, self.trainer.callback_metrics, self.trainer.strategy
        mine = {
            "first_sum_epoch": seen["first_sum_epoch"],
            "first_max": seen["first_max"],
            "reduce_sum": strategy.reduce(torch.tensor(1.0 + rank), group=self.first, reduce_op="sum"),
            "reduce_mean": _or_raised(lambda: strategy.reduce(torch.tensor(3.0 + rank), group=self.first)),
            "gather": _or_raised(lambda: self.all_gather(torch.tensor([5.0 + rank]), group=self.first).sum()),
        }
        for name, value in mine.items():
            for r in (0, 1):
                self.log(f"rank{r}_{name}", float(value) if r == rank else 0.0, sync_dist=True, reduce_fx="sum")

    def on_validation_epoch_start(self):
        self.log("val_opened", 1.0 + 2.0 * self.trainer.global_rank, sync_dist=True)
        self.log("val_opened_own", 1.0 + 2.0 * self.trainer.global_rank)  # each rank's own: rank 0's shown

    def validation_step(self, batch, batch_idx):
        pass

    def on_validation_epoch_end(self):
        seen = self.trainer.callback_metrics
        self.log("seen_val_opened", float(seen.get("val_opened", -1.0)))
        self.log("seen_val_opened_own", float(seen.get("val_opened_own", -1.0)))

    def val_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)


def _or_raised(reduce) -> float:
    """The value, or -1 where the framework stops (a mean or a gather over a group this rank is not in)."""
    try:
        return float(reduce())
    except (ValueError, RuntimeError):
        return -1.0


def main(framework_name: str, out: str) -> None:
    if framework_name == "lightning":
        import lightning.pytorch as framework

        module = type("LightningSyncedSteps", (SyncedSteps, framework.LightningModule), {})()
    else:
        import trainmesh as framework

        module = type("TrainmeshSyncedSteps", (SyncedSteps, framework.Module), {})()
    trainer = framework.Trainer(
        strategy="ddp_fork",
        accelerator="cpu",
        devices=2,
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out + "_root",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module)
    metrics = {name: value.item() for name, value in sorted(trainer.callback_metrics.items())}
    with open(out, "w") as f:
        json.dump(metrics, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
