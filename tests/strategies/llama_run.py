"""Legs of test_llama_parallel.py: the Llama helper trained a few steps under a named layout.

python llama_run.py --batch SPEC.json   (legs of one world size, one launch: tests/helpers/batches.py)
  a leg's argv: OUT LAYOUT [KEY=VALUE ...]
  LAYOUT: single | ddp | fsdp | tp | pp (pp=2, 1F1B, 4 micro-batches of 2 rows)
  build=meta: the layers are built in configure_model (the meta device under fsdp, tp and pp;
              the real device under single and ddp); build=eager (default): in __init__.
  positions=1: (tokens, targets, positions) batches, positions given to every block's rotary
              embedding (pipeline_kwargs under pp); validation on the same kind of batches.
  start=PATH: load the "initial" weights a leg saved into the model before training.
  whole=1: the issue-23 model: tied embeddings, sequence 14, uneven ignore_index padding, the loss
           summed over tokens with num_tokens (normalised by the global count), 7 steps, 2 layers (a
           layer a pipeline stage; 4 cost test_llama_whole.py 37.7 CPU-s, 2 cost 28.2; test_llama_parallel.py
           trains 4 under pp and tp).
Rank 0 writes OUT: the whole model's weights at fit start and at the end, callback_metrics.
The global batch is 8 samples in every layout.
"""

import os
import sys

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.llama import Llama, LlamaConfig, position_loader, token_loader  # noqa: E402
from trainmesh.strategies import ModelParallelStrategy  # noqa: E402

GLOBAL_BATCH = 8
LAYOUTS = {
    "single": (1, lambda: "single"),
    "ddp": (2, lambda: "ddp"),
    "fsdp": (2, lambda: "fsdp"),
    "tp": (2, lambda: ModelParallelStrategy(tp=2, dp_shard=1)),
    "pp": (2, lambda: ModelParallelStrategy(pp=2, dp_shard=1, schedule="1F1B", microbatches=4)),
    "pp_tp": (4, lambda: ModelParallelStrategy(pp=2, tp=2, dp_shard=1, schedule="1F1B", microbatches=4)),
    "fsdp_tp": (4, lambda: ModelParallelStrategy(tp=2, dp_shard=2)),
}


class RecordedLlama(Llama):
    def on_fit_start(self):
        # Copies: a state dict shares storage with the parameters, which train on.
        state = self.trainer.runtime.state_dicts(self, [])["model"]
        self.initial = {name: tensor.detach().cpu().clone() for name, tensor in state.items()}

    def validation_step(self, batch, batch_idx):
        tokens, targets = batch[:2]
        logits = self(tokens, **self.pipeline_kwargs(batch))
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)
        self.log("val_loss", loss)


def run_leg(argv: list[str]) -> None:
    out, layout, *options = argv
    opts = dict(option.split("=", 1) for option in options)
    devices, strategy = LAYOUTS[layout]
    whole = opts.get("whole") == "1"
    # whole=1: row r keeps (r * 5) % 14 + 1 targets, so batches of 8 repeat their padding every 7:
    # 7 steps see every placement of it over ranks and micro-batches (20 cost 3x the CPU for none new).
    steps = int(opts.get("steps", 7 if whole else 4))
    config = LlamaConfig(seq_len=14, tie_embeddings=True, n_layers=2) if whole else LlamaConfig()
    torch.manual_seed(0)
    model = RecordedLlama(config, lr=1e-3, summed_loss=whole, build_in_configure_model=opts.get("build") == "meta")
    if "start" in opts:
        model.load_state_dict(torch.load(opts["start"])["initial"])
    dp = 2 if layout in ("ddp", "fsdp", "fsdp_tp") else 1
    loaders = position_loader if opts.get("positions") == "1" else token_loader
    # Without whole=1, no padding: a mean over each rank's (or micro-batch's) tokens is then the
    # batch's mean. With it, padding and the summed loss: the global token count normalises.
    samples = GLOBAL_BATCH * steps if whole else 32
    train = loaders(config, batch_size=GLOBAL_BATCH // dp, samples=samples, uneven_padding=whole)
    if layout == "single":
        # The layouts' step k: the samples the Trainer's shuffling sampler deals their ranks (seed 0)
        from helpers.lightning_order import GlobalBatches

        order = GlobalBatches(len(train.dataset), world=1, batch_size=GLOBAL_BATCH)
        train = DataLoader(train.dataset, batch_size=GLOBAL_BATCH, sampler=order)
    val = (
        loaders(config, batch_size=GLOBAL_BATCH // dp, samples=12, seed=5, uneven_padding=False)
        if opts.get("positions") == "1"
        else None
    )
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy(),
        max_steps=steps,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=os.path.dirname(os.path.abspath(out)),
    )
    trainer.fit(model, train, val)
    final = trainer.runtime.state_dicts(model, [])["model"]
    if trainer.is_global_zero:
        torch.save(
            {
                "initial": model.initial,
                "final": {k: v.detach().cpu() for k, v in final.items()},
                "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
            },
            out,
        )


if __name__ == "__main__":
    from helpers.batches import run_batch

    run_batch(sys.argv[2], run_leg, limit=150)
