"""The legs of test_token_loss.py: the Llama test model on unevenly padded tokens, one epoch of
4 optimizer steps of a global batch of 8 sequences, under a layout.

python token_loss_run.py OUT LAYOUT [KEY=VALUE ...]
python token_loss_run.py --batch SPEC.json   (several legs in one launch: helpers/batches.py)
  LAYOUT: single | dp (2 devices, one process) | ddp | zero1 | fsdp (2 processes)
          | pp_gpipe (pp=2, 4 micro-batches) | pp_1f1b (pp=2, 2 micro-batches)
  KEY=VALUE: summed=1 (training_step returns {"loss": summed, "num_tokens": n}; else the mean loss),
             accumulate=N (the per-rank batch shrinks to keep the global batch at 8), clip=MAX_NORM
Rank 0 writes OUT: the whole model's weights, the loss the loop reports at each optimizer step,
and what on_train_batch_end received as outputs at each batch (its form, keys, loss, num_tokens and
the first token of each sample, a per-sample key the summed loss's training_step returns beside them).
"""

import os
import sys

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.lightning_order import GlobalBatches  # noqa: E402
from helpers.llama import Llama, LlamaConfig, token_loader  # noqa: E402
from trainmesh.strategies import ModelParallelStrategy  # noqa: E402

# seq_len 14: the padding leaves 53, 58, 58, 61 valid tokens in the four shuffled global batches, split
# unevenly over ranks and micro-batches (with seq_len 16 every batch of 8 holds 68, and a loss
# scaled by the count would move AdamW's weights as the mean does).
CONFIG = LlamaConfig(seq_len=14)
GLOBAL_BATCH = 8
# AdamW moves a weight whose gradient is about 0 by up to lr on rounding noise alone: at 1e-3 the
# same arithmetic reordered stays within 1e-6, and a wrongly scaled gradient moves weights by 1e-3.
LR = 1e-3

LAYOUTS = {
    "single": (1, 1, lambda: "single"),
    "dp": (2, 1, lambda: "dp"),
    "ddp": (2, 2, lambda: "ddp"),
    "zero1": (2, 2, lambda: "zero1"),
    "fsdp": (2, 2, lambda: "fsdp"),
    "pp_gpipe": (2, 1, lambda: ModelParallelStrategy(pp=2, dp_shard=1, schedule="GPipe", microbatches=4)),
    "pp_1f1b": (2, 1, lambda: ModelParallelStrategy(pp=2, dp_shard=1, schedule="1F1B", microbatches=2)),
}


class TokenLlama(Llama):
    """The summed loss's output also carries a per-sample tensor (each sample's first token)."""

    def training_step(self, batch, batch_idx):
        output = super().training_step(batch, batch_idx)
        return {**output, "first_tokens": batch[0][:, 0]} if isinstance(output, dict) else output


class StepLosses(tm.Callback):
    """The loss the loop reports (its running loss) after each optimizer step, and the outputs
    each batch's on_train_batch_end sees (a callback logging loss per token reads them)."""

    def __init__(self):
        self.losses, self.outputs = [], []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step > len(self.losses):
            self.losses.append(float(trainer.loop.last_loss))
        if isinstance(outputs, dict):
            count = outputs.get("num_tokens")
            first = outputs.get("first_tokens")
            seen = {
                "keys": sorted(outputs),
                "loss": float(outputs["loss"]),
                "first": None if first is None else first.tolist(),
            }
            self.outputs.append({**seen, "num_tokens": None if count is None else float(count)})
        else:
            self.outputs.append({"keys": type(outputs).__name__, "loss": float(outputs), "num_tokens": None})


def run_leg(argv):
    out, layout, opts = argv[0], argv[1], dict(arg.split("=", 1) for arg in argv[2:])
    devices, dp, strategy = LAYOUTS[layout]
    accumulate = int(opts.get("accumulate", 1))
    torch.manual_seed(0)
    model = TokenLlama(CONFIG, lr=LR, summed_loss=opts.get("summed", "1") == "1")
    losses = StepLosses()
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy(),
        max_epochs=1,
        accumulate_grad_batches=accumulate,
        gradient_clip_val=float(opts["clip"]) if "clip" in opts else None,
        callbacks=[losses],
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    loader = token_loader(CONFIG, batch_size=GLOBAL_BATCH // dp // accumulate)
    if dp == 1 and devices == 1 or layout == "dp":
        # One process (dp: its 2 chunks) reads the order a pipeline's one data-parallel rank is dealt
        # (the Trainer's shuffling sampler, seed 0), in its rows' order: the 2 ddp ranks' micro-step j
        # holds the same samples (rank r: perm[r::2]), so each optimizer step sees ddp's samples too.
        order = GlobalBatches(len(loader.dataset), world=1, batch_size=GLOBAL_BATCH // accumulate)
        loader = DataLoader(loader.dataset, batch_size=GLOBAL_BATCH // accumulate, sampler=order)
    trainer.fit(model, loader)
    full = trainer.runtime.state_dicts(trainer.model, [], sharded=False)["model"]
    if trainer.is_global_zero:
        torch.save(
            {
                "state_dict": {k: v.detach().cpu() for k, v in full.items()},
                "losses": losses.losses,
                "outputs": losses.outputs,
                "steps": trainer.global_step,
            },
            out,
        )


if __name__ == "__main__":
    if sys.argv[1] == "--batch":
        from helpers.batches import run_batch

        run_batch(sys.argv[2], run_leg, limit=120)
    else:
        run_leg(sys.argv[1:])
