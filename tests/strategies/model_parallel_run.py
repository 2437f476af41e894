"""The processes of test_model_parallel.py, test_pipeline.py and test_tensor_parallel.py
(model_parallel_legs.py): Trainer runs under named layouts.

python model_parallel_run.py OUT LAYOUT [KEY=VALUE ...]
python model_parallel_run.py --batch LEGS.json   (a list of [OUT, LAYOUT, {KEY: VALUE}], one world size)
  The batch form runs the legs one after another in the same processes (one launch, one process
  group): starting 2-8 interpreters per leg was most of this module's time. With
  TESTS_WORKERS=fork (helpers/batches.py) its workers are forks of this process. A leg that fails
  writes its traceback to OUT.error-RANK and ends the launch.
  LAYOUT: single | pp_gpipe | pp_1f1b | pp_interleaved | pp_zbv | tp | tp_lossp | fsdp_tp | pp_replicate | pp_fsdp
          | ddp | fsdp | pp_split | pp_fsdp_tp (world 8) | pp_looped | pp_izb | pp_dualpipev
          | pp_tp_ac (pp=2 x tp=2, activation checkpointing)
  KEY=VALUE: clip=1.0, accumulate=2, epochs=2, steps=N, val=0 (no validation loader),
             save=PATH (after fit: Trainer.save_checkpoint(PATH); a model-parallel or fsdp run writes a
             distributed checkpoint directory there), resume=PATH (fit(ckpt_path=PATH): another layout may
             resume it; with epochs= the saved run's epochs no training step runs), evaluate=1 (after fit:
             Trainer.test and Trainer.predict on 37 held-out samples, saved as "test" and "predictions")
Rank 0 writes OUT: the whole model's weights (gathered), callback_metrics as fit left them (before
any test), the step count.
The Trainer's own files (ModelCheckpoint's, with save=) go to OUT's folder, never into PATH.
The global batch is the same in every layout (16 samples), so every layout matches `single`.
"""

import faulthandler
import json
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset

import trainmesh as tm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))  # tests/helpers
from trainmesh.strategies import ModelParallelStrategy

GLOBAL_BATCH, D = 16, 16
# The legs' training set: 4 global batches an epoch, 8 steps in 2 epochs (4 with accumulate=2; a
# data-parallel shard's 32 samples make 4 batches too). 96 samples (12 steps) cost half as much
# again and showed nothing more: at 8 the layouts measure within 2.4e-7 of one process, as at 12,
# and a clip left out moves the weights 6.4e-3 to 1.3e-2 (test_clipping_really_clips_in_the_reference).
TRAIN_SAMPLES = 64


def dataset(n=96, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, (x[:, :4].argmax(1) + (x[:, 5] > 1).long()) % 4)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.up = nn.Linear(D, 2 * D)
        self.down = nn.Linear(2 * D, D)

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(self.norm(x))))


class Net(tm.Module):
    """A small transformer-like stack; forward skips the parts another pipeline stage holds."""

    def __init__(self, lossp=False):
        super().__init__()
        torch.manual_seed(0)
        self.lossp = lossp
        self.inp = nn.Linear(8, D)
        self.layers = nn.ModuleDict({str(i): Block() for i in range(4)})
        self.head = nn.Linear(D, 4)

    def forward(self, x):
        h = self.inp(x) if self.inp is not None else x
        for layer in self.layers.values():
            h = layer(h)
        return self.head(h) if self.head is not None else h

    def tensor_parallel_plan(self):
        from torch.distributed.tensor import Shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        plan = {"layers.*.up": ColwiseParallel(), "layers.*.down": RowwiseParallel()}
        if self.lossp:
            plan["head"] = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
        return plan

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True, prog_bar=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean() if not self.lossp else torch.tensor(0.0))

    def predict_step(self, batch, batch_idx):  # the default is forward(batch), as Lightning's: batch is a pair
        return self(batch[0])

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.cross_entropy(self(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


LAYOUTS = {
    "single": (1, lambda: "single"),
    "ddp": (2, lambda: "ddp"),
    "fsdp": (2, lambda: "fsdp"),
    "pp_gpipe": (2, lambda: ModelParallelStrategy(pp=2, dp_shard=1, schedule="GPipe", microbatches=4)),
    "pp_1f1b": (2, lambda: ModelParallelStrategy(pp=2, dp_shard=1, schedule="1F1B", microbatches=4)),
    "pp_split": (2, lambda: ModelParallelStrategy(pp=2, dp_shard=1, schedule="1F1B", split_points=["layers.1"])),
    "pp_interleaved": (2, lambda: ModelParallelStrategy(pp=2, dp_shard=1, schedule="Interleaved1F1B", microbatches=4)),
    "pp_looped": (2, lambda: ModelParallelStrategy(pp=2, dp_shard=1, schedule="LoopedBFS", microbatches=4)),
    "pp_izb": (2, lambda: ModelParallelStrategy(pp=2, dp_shard=1, schedule="InterleavedZeroBubble", microbatches=4)),
    "pp_dualpipev": (2, lambda: ModelParallelStrategy(pp=2, dp_shard=1, schedule="DualPipeV", microbatches=4)),
    "pp_tp_ac": (
        4,
        lambda: ModelParallelStrategy(pp=2, tp=2, dp_shard=1, microbatches=2, activation_checkpointing=[Block]),
    ),
    "pp_zbv": (2, lambda: ModelParallelStrategy(pp=2, dp_shard=1, schedule="ZBVZeroBubble", microbatches=4)),
    "tp": (2, lambda: "tp"),
    "tp_lossp": (2, lambda: ModelParallelStrategy(tp=2, dp_shard=1, loss_parallel=True)),
    "fsdp_tp": (4, lambda: "fsdp_tp"),
    "pp_replicate": (4, lambda: ModelParallelStrategy(pp=2, dp_replicate=2, dp_shard=1, microbatches=2)),
    "pp_fsdp_tp": (8, lambda: ModelParallelStrategy(pp=2, dp_shard=2, tp=2, microbatches=2)),
    "pp_fsdp": (4, lambda: ModelParallelStrategy(pp=2, dp_shard=2, microbatches=2)),
}


def run_leg(out: str, layout: str, opts: dict[str, str]) -> None:
    devices, strategy = LAYOUTS[layout]
    model = Net(lossp=layout == "tp_lossp")
    dp = {"single": 1, "ddp": 2, "fsdp": 2, "fsdp_tp": 2, "pp_replicate": 2, "pp_fsdp": 2, "pp_fsdp_tp": 2}.get(
        layout, 1
    )
    loader = DataLoader(dataset(TRAIN_SAMPLES), batch_size=GLOBAL_BATCH // dp)
    if layout == "single":
        # The other layouts' step k: the samples the Trainer's shuffling sampler deals their ranks
        from helpers.lightning_order import GlobalBatches

        order = GlobalBatches(len(loader.dataset), world=1, batch_size=GLOBAL_BATCH)
        loader = DataLoader(loader.dataset, batch_size=GLOBAL_BATCH, sampler=order)
    val = DataLoader(dataset(40, seed=1), batch_size=GLOBAL_BATCH // dp)
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy(),
        max_epochs=int(opts.get("epochs", 2)),
        max_steps=int(opts.get("steps", -1)),
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing="save" in opts,
        num_sanity_val_steps=0,
        gradient_clip_val=float(opts["clip"]) if "clip" in opts else None,
        accumulate_grad_batches=int(opts.get("accumulate", 1)),
        default_root_dir=os.path.dirname(os.path.abspath(out)),
    )
    trainer.fit(model, loader, val if opts.get("val", "1") == "1" else None, ckpt_path=opts.get("resume"))
    metrics = dict(trainer.callback_metrics)  # fit's: a leg with evaluate=1 answers for fit alone too
    if "save" in opts:
        trainer.save_checkpoint(opts["save"])
    evaluated = {}
    if opts.get("evaluate") == "1":
        # test and predict after fit: a batch of 7 (37 samples) is the last one of each shard.
        held_out = DataLoader(dataset(37, seed=2), batch_size=GLOBAL_BATCH // dp)
        evaluated["test"] = trainer.test(model, held_out, verbose=False)
        if layout == "single":
            # What 2 data-parallel ranks test, as Lightning's: DistributedSampler's shares, 37
            # samples padded to 38 by repeating sample 0 (predict reads every sample once).
            shares = [i for r in (0, 1) for i in DistributedSampler(range(37), num_replicas=2, rank=r, shuffle=False)]
            two_ranks = DataLoader(Subset(held_out.dataset, shares), batch_size=GLOBAL_BATCH)
            evaluated["test_two_ranks"] = trainer.test(model, two_ranks, verbose=False)
            # What rank 0 of 2 predicts, as Lightning's: its own share (samples 0, 2, ..., 36), not every rank's
            rank_0 = list(DistributedSampler(range(37), num_replicas=2, rank=0, shuffle=False))
            first_share = DataLoader(Subset(held_out.dataset, rank_0), batch_size=GLOBAL_BATCH // 2)
            evaluated["predictions_rank_0"] = torch.cat([p.cpu() for p in trainer.predict(model, first_share)])
        evaluated["predictions"] = torch.cat([p.cpu() for p in trainer.predict(model, held_out)])
    full = trainer.runtime.state_dicts(trainer.model, [], sharded=False)["model"]
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": {k: v.detach().cpu() for k, v in full.items()},
                "metrics": metrics,
                "steps": trainer.global_step,
                **evaluated,
            },
            out,
        )


def run_legs(legs: list, limit: int) -> None:
    # A fatal signal (a native crash) writes every thread's native stack (torch's handler, which
    # then calls faulthandler's) and Python stack to stderr, where model_parallel_legs.py finds it
    # and names it (helpers/leg_crashes.py).
    faulthandler.enable(all_threads=True)
    torch._C._set_print_stack_traces_on_fatal_signal(True)
    for index, (out, layout, opts) in enumerate(legs):
        # A hang ends the launch. The legs left, not one: under torchrun's start the agent process
        # waits inside the first leg's fit while its workers run the whole batch.
        faulthandler.dump_traceback_later(limit * (len(legs) - index), exit=True)
        try:
            run_leg(out, layout, opts)
        except Exception:  # not SystemExit: the agent process ends that way once its workers ran the batch
            Path(f"{out}.error-{os.environ.get('RANK', '0')}").write_text(traceback.format_exc())
            raise
    faulthandler.cancel_dump_traceback_later()


def main():
    limit = int(os.environ.get("RUN_TIMEOUT", "240"))
    if sys.argv[1] != "--batch":
        run_legs([[sys.argv[1], sys.argv[2], dict(arg.split("=", 1) for arg in sys.argv[3:])]], limit)
        return
    legs = json.loads(Path(sys.argv[2]).read_text())
    world = LAYOUTS[legs[0][1]][0]
    if world > 1 and os.environ.get("TESTS_WORKERS") == "fork":
        # This process was forked with torch loaded (helpers/forked.py): its workers are forks of
        # it, which run the legs in one process group (no interpreter to start per worker).
        tm.Runtime(accelerator="cpu", strategy="ddp_fork", devices=world).launch(run_legs, legs, limit)
        return
    run_legs(legs, limit)


if __name__ == "__main__":
    main()
