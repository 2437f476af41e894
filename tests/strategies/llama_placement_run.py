"""Legs of test_llama_placement.py: the Llama test model placed and trained for 2 steps.

python llama_placement_run.py LAYOUT PRECISION ROUTE OUT
python llama_placement_run.py --batch SPEC.json   (several legs in one launch: tests/helpers/batches.py)
  LAYOUT: ddp | fsdp | tp | pp (world 2) | fsdp_tp (world 4)
  ROUTE: plan (the module's tensor_parallel_plan()) | user (its configure_model(mesh) applies
         parallelize_module itself, with the same plan)
Every rank writes OUT.rank-N: its freqs_cis buffer and the dtype of each parameter it holds;
rank 0 also writes OUT: the whole model's trained weights (gathered).
"""

import faulthandler
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.llama import Llama, LlamaConfig, token_loader  # noqa: E402
from trainmesh.strategies import ModelParallelStrategy  # noqa: E402

CONFIG = LlamaConfig()
GLOBAL_BATCH = 8

LAYOUTS = {
    "ddp": (2, lambda: "ddp"),
    "fsdp": (2, lambda: "fsdp"),
    "tp": (2, lambda: ModelParallelStrategy(tp=2, dp_shard=1)),
    "pp": (2, lambda: ModelParallelStrategy(pp=2, dp_shard=1, microbatches=2)),
    "fsdp_tp": (4, lambda: ModelParallelStrategy(tp=2, dp_shard=2)),
}


class UserParallelizedLlama(Llama):
    """The README's route for one's own tensor-parallel code (a torchtitan ``apply_tp``)."""

    def tensor_parallel_plan(self):
        return None

    def configure_model(self, mesh):
        from torch.distributed.tensor.parallel import parallelize_module

        if mesh.group_size("tp") > 1:
            parallelize_module(self, mesh.submesh("tp"), Llama.tensor_parallel_plan(self))


class HalfLlama(Llama):
    """For "16-true": AdamW's default eps (1e-8) is 0 in float16, so a parameter whose gradient is
    0 would divide 0 by 0 (NaN); 1e-4 is a float16 number (plain torch in fp16 needs the same)."""

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr, eps=1e-4)


def main(layout: str, precision: str, route: str, out: str) -> None:
    devices, strategy = LAYOUTS[layout]
    torch.manual_seed(0)
    model = (
        UserParallelizedLlama(CONFIG) if route == "user" else (HalfLlama if precision == "16-true" else Llama)(CONFIG)
    )
    dp = {"ddp": 2, "fsdp": 2, "fsdp_tp": 2}.get(layout, 1)
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy(),
        precision=precision,
        max_steps=2,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=os.path.dirname(os.path.abspath(out)),
    )
    trainer.fit(model, token_loader(CONFIG, batch_size=GLOBAL_BATCH // dp, samples=16))
    mine = {
        "freqs_cis": model.freqs_cis.detach().cpu().clone(),
        "dtypes": {name: param.dtype for name, param in model.named_parameters()},
    }
    torch.save(mine, f"{out}.rank-{trainer.global_rank}")
    full = trainer.runtime.state_dicts(trainer.model, [], sharded=False)["model"]
    if trainer.is_global_zero:
        torch.save({name: value.detach().cpu() for name, value in full.items()}, out)


if __name__ == "__main__":
    if sys.argv[1] == "--batch":
        from helpers.batches import run_batch

        run_batch(sys.argv[2], lambda argv: main(*argv), limit=180)
    else:
        faulthandler.dump_traceback_later(180, exit=True)
        main(*sys.argv[1:])
