"""Peak memory per rank of a Llama built eagerly or on the meta device, under tp=2 and pp=2, next to one process.

The model is tests/helpers/llama.py's Llama, larger (``--dim``, ``--layers``, ``--vocab``), trained
``--steps`` AdamW steps on 2 CPU processes (gloo) or one:

    single       one process, built in __init__ (the reference)
    tp-eager     ModelParallelStrategy(tp=2): built whole in __init__ on every rank, then split
    tp-meta      the same, built in configure_model: on the meta device, split, then each rank
                 allocates its shards; init_weights() runs on lazy whole stand-ins of them,
                 one whole at a time (strategies/stand_ins.py)
    pp-eager     ModelParallelStrategy(pp=2, 1F1B): built whole in __init__, then cut
    pp-meta      built in configure_model on meta: each rank allocates only its stage, and
                 replays the other stage's draws on throwaway tensors, one at a time

Each rank reads its resident memory before the model is built (the baseline: interpreter, torch;
the peak is reset there, /proc/self/clear_refs), its peak when fit starts (the build, the split
and the initialisation: the *setup* peak; then reset again) and its peak over training (the
*training* peak); the figures are the peaks above the baseline, in MiB.

    python benchmarks/meta_build_memory.py [--dim 512] [--layers 8] [--vocab 16384] [--steps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import trainmesh as tm  # noqa: E402
from helpers.llama import Llama, LlamaConfig, token_loader  # noqa: E402
from trainmesh.strategies import ModelParallelStrategy  # noqa: E402

LAYOUTS = ("single", "tp-eager", "tp-meta", "pp-eager", "pp-meta")


def peak_mib() -> float:
    """This process's peak resident memory (VmHWM) since the last ``reset_peak()``."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


def reset_peak() -> float:
    """Reset the peak to the current resident memory (Linux: clear_refs 5); returns it."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    return peak_mib()


class Measured(Llama):
    def on_fit_start(self) -> None:
        self.setup_peak = peak_mib()
        reset_peak()  # training's own peak from here

    def on_train_end(self) -> None:
        figures = {
            "rank": self.trainer.global_rank,
            "setup": self.setup_peak - self.baseline,
            "training": peak_mib() - self.baseline,
            "parameters": sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in self.parameters()),
        }
        ranks = [None] * self.trainer.world_size
        if dist.is_initialized():
            dist.all_gather_object(ranks, figures)
        else:
            ranks = [figures]
        if self.trainer.global_rank == 0:
            with open(self.out, "w") as file:
                json.dump(ranks, file)


def run_worker(layout: str, out: str, args: argparse.Namespace) -> None:
    warnings.filterwarnings("ignore")
    config = LlamaConfig(vocab=args.vocab, dim=args.dim, n_layers=args.layers, n_heads=8, n_kv_heads=4, seq_len=64)
    strategy = {
        "single": "single",
        "tp": ModelParallelStrategy(tp=2, dp_shard=1),
        "pp": ModelParallelStrategy(pp=2, dp_shard=1, schedule="1F1B", microbatches=2),
    }[layout.split("-")[0]]
    baseline = reset_peak()
    torch.manual_seed(0)
    model = Measured(config, lr=1e-4, build_in_configure_model=layout.endswith("meta"))
    model.baseline, model.out = baseline, out
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1 if layout == "single" else 2,
        strategy=strategy,
        max_steps=args.steps,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, token_loader(config, batch_size=4, samples=4 * args.steps))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=16384)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--worker")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker, args.out, args)
        return
    shape = [
        "--dim",
        str(args.dim),
        "--layers",
        str(args.layers),
        "--vocab",
        str(args.vocab),
        "--steps",
        str(args.steps),
    ]
    whole = sum(
        p.numel()
        for p in Llama(
            LlamaConfig(vocab=args.vocab, dim=args.dim, n_layers=args.layers, n_heads=8, n_kv_heads=4, seq_len=64)
        ).parameters()
    )
    print(
        f"Llama dim={args.dim} layers={args.layers} vocab={args.vocab}: {whole / 1e6:.1f}M parameters, "
        f"{whole * 4 / 2**20:.0f} MiB in fp32; peaks above each rank's baseline, MiB"
    )
    print(f"{'layout':10} {'rank':>4} {'params held':>12} {'setup peak':>11} {'training peak':>14}")
    with tempfile.TemporaryDirectory() as folder:
        for layout in LAYOUTS:
            out = os.path.join(folder, f"{layout}.json")
            subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--worker", layout, "--out", out, *shape],
                check=True,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
                timeout=600,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for rank in json.load(open(out)):
                print(
                    f"{layout:10} {rank['rank']:>4} {rank['parameters'] / 1e6:>11.1f}M {rank['setup']:>11.0f} "
                    f"{rank['training']:>14.0f}"
                )


if __name__ == "__main__":
    main()
