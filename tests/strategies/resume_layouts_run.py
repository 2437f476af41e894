"""The processes of test_resume_layouts.py: the tiny Llama trained under one layout, saved, and
resumed under another.

python resume_layouts_run.py MODE OUT LAYOUT [CKPT] [KEY=VALUE ...]
python resume_layouts_run.py --batch SPEC.json   (legs of one world size in one launch; helpers/batches.py)
  MODE: full    train STEPS steps from scratch
        pause   train PAUSE steps, then Trainer.save_checkpoint(CKPT) (a file from one process, ddp and
                fsdp_full, a distributed checkpoint directory from fsdp and the model-parallel layouts)
        resume  fit(ckpt_path=CKPT) up to STEPS steps: the rest of the uninterrupted run
        unnamed CKPT's optimizer state as torch's optimizer.state_dict() alone writes it (numbered,
                without the parameters' names) into CKPT.unnamed (a one-process leg)
        refused resume CKPT, which must be refused before any step: OUT gets the error's message
        fails   train; the leg fails (a test reads its traceback; the last leg of its launch)
  LAYOUT: single | ddp | fsdp | tp | pp | fsdp_tp (world 4) | pp_tp (world 4)
          fsdp: FSDPStrategy(state_dict_type="sharded"); fsdp_full: strategy="fsdp" as it is (one file)
  KEY=VALUE: model=gpt (nanoGPT, helpers/nanogpt.py: its lm_head tied to wte; else the tiny Llama),
             model=published_gpt (nanoGPT's forward as published), split=NAME (pp's split_points=[NAME])
Rank 0 writes OUT: the whole model's weights (gathered), every parameter's AdamW step count, the
step count. The global batch is 8 samples in every layout, and no row is padded, so that every
layout computes the same loss (up to the order of float32 sums).
"""

import os
import sys

import torch
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.lightning_order import GlobalBatches  # noqa: E402
from helpers.llama import Llama, LlamaConfig, token_loader  # noqa: E402
from helpers.nanogpt import GPT, GPTConfig, PublishedGPT, gpt_loader  # noqa: E402
from trainmesh.runtime_optimizer import inner_optimizer  # noqa: E402
from trainmesh.strategies import FSDPStrategy, ModelParallelStrategy  # noqa: E402

PAUSE, STEPS, GLOBAL_BATCH = 1, 2, 8
# Two layers, not the default four: every layout still shards, splits or cuts between layers (pp=2: one
# layer a stage), and a leg's cost is mostly per layer (DTensor's dispatch, FSDP's units, DCP's entries):
# the file's legs 39% less CPU. AdamW's eps 1e-6 (torch's default 1e-8): with two layers a few weights get
# gradients near 1e-8, where eps 1e-8 turns the float32 sums' order into update differences of 1.6e-4
# between layouts; with 1e-6 they are within 4.2e-6. A lost optimizer state or a restarted loader is off
# by 1.7e-2 either way.
CONFIG, ADAM_EPS = LlamaConfig(n_layers=2), 1e-6
# name -> (processes, data-parallel size, strategy)
LAYOUTS = {
    "single": (1, 1, lambda: "single"),
    "ddp": (2, 2, lambda: "ddp"),
    "fsdp": (2, 2, lambda: FSDPStrategy(state_dict_type="sharded")),  # a distributed checkpoint
    "fsdp_full": (2, 2, lambda: "fsdp"),  # its default, Lightning's: one file gathered on rank 0
    "tp": (2, 1, lambda: "tp"),
    "pp": (2, 1, lambda: "pp"),
    "fsdp_tp": (4, 2, lambda: "fsdp_tp"),
    "pp_tp": (4, 1, lambda: ModelParallelStrategy(pp=2, tp=2, dp_shard=1)),
    "pp_fsdp": (4, 2, lambda: ModelParallelStrategy(pp=2, dp_shard=2)),
    "hsdp": (4, 4, lambda: ModelParallelStrategy(dp_replicate=2, dp_shard=2)),
}


def strip_param_names(path: str) -> None:
    checkpoint = torch.load(path, weights_only=False)
    for state in checkpoint["optimizer_states"]:
        for group in state["param_groups"]:
            group.pop("param_names", None)
    torch.save(checkpoint, path + ".unnamed")


def model_and_data(name: str, batch_size: int) -> tuple:
    if name == "llama":
        loader = token_loader(CONFIG, batch_size=batch_size, samples=4 * GLOBAL_BATCH, uneven_padding=False)
        return Llama(CONFIG, adam_eps=ADAM_EPS), loader
    gpt = GPT if name == "gpt" else PublishedGPT
    return gpt(GPTConfig()), gpt_loader(GPTConfig(), batch_size=batch_size, samples=4 * GLOBAL_BATCH)


def adam_steps(trainer: tm.Trainer) -> list[float]:
    """The distinct AdamW step counts of every parameter of every rank (each rank's own state)."""
    local = set()
    for optimizer in trainer.optimizers:
        for entry in inner_optimizer(optimizer).state.values():
            step = entry["step"]
            local.add(float(step.full_tensor() if isinstance(step, DTensor) else step))
    if not torch.distributed.is_initialized():
        return sorted(local)
    every: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(every, sorted(local))
    return sorted({step for steps in every for step in steps})


def main(argv: list[str]) -> None:
    options = dict(arg.split("=", 1) for arg in argv if "=" in arg)
    argv = [arg for arg in argv if "=" not in arg]
    mode, out, layout = argv[:3]
    if mode == "unnamed":
        strip_param_names(argv[3])
        torch.save({}, out)
        return
    devices, dp, strategy = LAYOUTS[layout]
    torch.manual_seed(0)
    model, loader = model_and_data(options.get("model", "llama"), GLOBAL_BATCH // dp)
    if layout == "single":
        # The samples the other layouts' ranks read: the Trainer's distributed sampler shuffles (seed 0)
        order = GlobalBatches(len(loader.dataset), world=1, batch_size=GLOBAL_BATCH)
        loader = DataLoader(loader.dataset, batch_size=GLOBAL_BATCH, sampler=order)
    split = options.get("split")
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=ModelParallelStrategy(pp=2, dp_shard=1, split_points=[split]) if split else strategy(),
        max_steps=PAUSE if mode == "pause" else STEPS,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=os.path.dirname(out),
        exact_resume=True,  # the rest of the uninterrupted run, in another layout
    )
    ckpt_path = argv[3] if mode in ("resume", "refused") else None
    if mode == "refused":
        try:
            trainer.fit(model, loader, ckpt_path=ckpt_path)
        except ValueError as exc:
            if trainer.is_global_zero:
                torch.save({"error": str(exc), "steps": trainer.global_step}, out)
            return
        raise AssertionError(f"{layout} resumed {ckpt_path}, which it should have refused")
    trainer.fit(model, loader, ckpt_path=ckpt_path)
    if mode == "pause":
        trainer.save_checkpoint(argv[3])
    # The weights gathered whole. Of the optimizer, the step counts each rank holds; its whole
    # state (AdamW's two moments gathered, collectives per parameter) only in the uninterrupted
    # runs, one per layout, whose step counts must be the same from both.
    optimizers = trainer.optimizers if mode == "full" else []
    full = trainer.runtime.state_dicts(trainer.model, optimizers, sharded=False)
    steps = adam_steps(trainer)
    if optimizers and trainer.is_global_zero:
        (optimizer,) = full["optim"]
        gathered = sorted({float(entry["step"]) for entry in optimizer["state"].values()})
        assert gathered == steps, f"the gathered optimizer state counts {gathered} steps, its ranks {steps}"
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": {k: v.detach().cpu() for k, v in full["model"].items()},
                "adam_steps": steps,
                "steps": trainer.global_step,
            },
            out,
        )


if __name__ == "__main__":
    if sys.argv[1] == "--batch":
        from helpers.batches import run_batch

        run_batch(sys.argv[2], main, limit=120)
    else:
        main(sys.argv[1:])
