"""Per-rank training-state memory under ddp, zero1, sharded, fsdp and hsdp, next to ZeRO's formulas.

The same model (``--depth`` blocks of Linear(width, width) + Tanh and a 10-class head: about
3.3M parameters at the defaults), Adam, generated data and ``--steps`` optimizer steps, under
each strategy on 2 CPU processes (gloo). Each rank measures, just before the last optimizer
step (the moment parameters, gradients and optimizer state all exist: ``zero_grad`` may drop
gradients to None after it), the bytes of each it holds locally (DTensor shards counted
locally), and after training its peak resident memory. These are printed beside the ZeRO
paper's per-rank figure for Ψ parameters, N ranks and fp32 Adam (K = 8 bytes of state per
parameter):

    ddp                 4Ψ + 4Ψ + 8Ψ
    zero1   (P_os)      4Ψ + 4Ψ + 8Ψ/N
    sharded (P_os+g)    4Ψ + (4Ψ + 8Ψ)/N
    fsdp    (P_os+g+p)  16Ψ/N
    hsdp                16Ψ/S, S the shard group (the processes of a node by default)

Next to them, trainmesh's own estimate made before any run (``tm.estimate_memory``, the figure
``trainmesh estimate`` prints and ``strategy="auto"`` decides by) and its ratio to each measured part.

    python benchmarks/sharding_memory.py [--steps 10] [--width 640] [--depth 8]

The parent runs one program per strategy (``--worker STRATEGY --out FILE``); that program is
the elastic agent that re-runs itself as the 2 workers, and each worker writes its figures to
``FILE.rank{r}`` (JSON), which the parent reads back to print one table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import warnings

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.data.synthetic import make_classification_tensors
from trainmesh.memory_estimate import estimate_memory
from trainmesh.utilities.memory import local_state_bytes

WORLD_SIZE, CLASSES, PER_RANK_BATCH = 2, 10, 32
STRATEGIES = ("ddp", "zero1", "sharded", "fsdp", "hsdp")
MiB = 2**20


class WideNet(tm.Module):
    """Equal-size layers, so that every rank gets a similar share of every shard unit."""

    def __init__(self, *, width: int, depth: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh())
                                            for _ in range(depth)])
        self.head = torch.nn.Linear(width, CLASSES)
        self.memory: dict[str, int] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)

    def on_before_optimizer_step(self, optimizer) -> None:
        # Overwritten every step: what remains is the last step's, taken before it updates.
        self.memory = local_state_bytes(self.trainer.model, self.trainer.optimizers)


def formula(strategy: str, psi: int, n: int, shard: int) -> tuple[str, dict[str, float]]:
    """ZeRO's per-rank bytes (parameters, gradients, optimizer state) for fp32 Adam."""
    per_rank = {
        "ddp": ("4Ψ+4Ψ+8Ψ", (4 * psi, 4 * psi, 8 * psi)),
        "zero1": ("4Ψ+4Ψ+8Ψ/N", (4 * psi, 4 * psi, 8 * psi / n)),
        "sharded": ("4Ψ+(4Ψ+8Ψ)/N", (4 * psi, 4 * psi / n, 8 * psi / n)),
        "fsdp": ("16Ψ/N", (4 * psi / n, 4 * psi / n, 8 * psi / n)),
        "hsdp": (f"16Ψ/S, S={shard}", (4 * psi / shard, 4 * psi / shard, 8 * psi / shard)),
    }
    text, (params, grads, state) = per_rank[strategy]
    return text, {"parameters": params, "gradients": grads, "optimizer_state": state}


def run_worker(strategy: str, out: str, *, steps: int, width: int, depth: int) -> None:
    """One strategy's training; the first process becomes the agent of the 2 that run this."""
    warnings.filterwarnings("ignore")
    baseline_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # torch imported, no model yet
    model = WideNet(width=width, depth=depth)
    x, y = make_classification_tensors(WORLD_SIZE * PER_RANK_BATCH * steps, width, CLASSES, seed=0)
    trainer = tm.Trainer(accelerator="cpu", strategy=strategy, devices=WORLD_SIZE, max_steps=steps,
                         enable_progress_bar=False, enable_model_summary=False, logger=False,
                         enable_checkpointing=False)
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=PER_RANK_BATCH))
    figures = {
        **model.memory,
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,  # KiB on Linux
        "baseline_rss_kib": baseline_kib,
        "steps": trainer.global_step,
    }
    with open(f"{out}.rank{trainer.global_rank}", "w") as file:
        json.dump(figures, file)


def run_strategy(strategy: str, out: str, args: argparse.Namespace) -> list[dict]:
    command = [sys.executable, os.path.abspath(__file__), "--worker", strategy, "--out", out,
               "--steps", str(args.steps), "--width", str(args.width), "--depth", str(args.depth)]
    # One thread per worker: 2 workers on a small machine must not oversubscribe its cores.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # Its own session, so that on timeout the agent and its workers go together.
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        output, _ = child.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        output, _ = child.communicate()
        raise SystemExit(f"{strategy}: no result after {args.timeout}s; its output:\n{output}") from None
    if child.returncode != 0:
        raise SystemExit(f"{strategy}: exited with {child.returncode}; its output:\n{output}")
    ranks = []
    for rank in range(WORLD_SIZE):
        with open(f"{out}.rank{rank}") as file:
            ranks.append(json.load(file))
    return ranks


def print_table(results: dict[str, list[dict]], psi: int, args: argparse.Namespace) -> None:
    n = shard = WORLD_SIZE  # hsdp's default shard group: the processes of one node, here all of them
    # trainmesh's own estimate (trainmesh estimate / tm.estimate_memory), made before any run.
    model = WideNet(width=args.width, depth=args.depth)
    estimates = {s: estimate_memory(model, strategy=s, world_size=n, optimizer="adam") for s in results}
    keys = ("parameters", "gradients", "optimizer_state")
    print(f"Ψ = {psi:,} parameters ({args.depth} x Linear({args.width}, {args.width}) + head), N = {n} CPU "
          f"processes (gloo), fp32 Adam (K = 8), {args.steps} steps; MiB per rank, (x ddp) = ratio to ddp's "
          "same rank")
    header = (f"{'strategy':8s} {'rank':>4s} | {'params':>13s} {'grads':>13s} {'optim state':>13s} "
              f"{'total':>13s} | {'ZeRO formula':17s} {'MiB':>6s} {'meas/formula p g o':>20s} | "
              f"{'estimate':>8s} {'est/meas p g o total':>23s} | "
              f"{'peak RSS':>14s} {'above start':>11s}")
    print(header)
    print("-" * len(header))
    for strategy, ranks in results.items():
        text, expected = formula(strategy, psi, n, shard)
        for rank, figures in enumerate(ranks):
            ddp = results["ddp"][rank] if "ddp" in results else figures
            figures = {**figures, "total": sum(figures[k] for k in keys)}
            ddp_total = sum(ddp[k] for k in keys)
            cells = [f"{figures[k] / MiB:6.2f} ({figures[k] / ddp[k]:4.2f})" for k in keys]
            cells.append(f"{figures['total'] / MiB:6.2f} ({figures['total'] / ddp_total:4.2f})")
            match = " ".join(f"{figures[k] / expected[k]:.3f}" for k in keys)
            estimate = estimates[strategy]
            ratios = " ".join(f"{getattr(estimate, k) / figures[k]:.3f}" for k in keys)
            ratios += f" {estimate.state / figures['total']:.3f}"
            rss, growth = figures["peak_rss_kib"] / 1024, (figures["peak_rss_kib"] - figures["baseline_rss_kib"]) / 1024
            print(f"{strategy:8s} {rank:4d} | {' '.join(f'{c:>13s}' for c in cells)} | {text:17s} "
                  f"{sum(expected.values()) / MiB:6.2f} {match:>20s} | "
                  f"{estimate.state / MiB:8.2f} {ratios:>23s} | "
                  f"{rss:6.0f} ({rss / (ddp['peak_rss_kib'] / 1024):4.2f}) {growth:11.0f}")
    print(f"hsdp: with {n} processes on one node its default shard group S is both processes (a 1 x {n} "
          "mesh), so it is fsdp; a real 2-D mesh (replicate x shard, both > 1) needs at least 4 processes.")
    if "sharded" in results and results["sharded"][0]["parameters"] < 0.9 * 4 * psi:
        print("sharded: FSDP2 keeps parameters whole only from forward to backward (reshard_after_forward="
              "False); post-backward reshards them (reshard_after_backward defaults to True) and Adam updates "
              "the shards, so at the step a rank holds 4Ψ/N of parameters, not ZeRO-2's 4Ψ.")
    print("peak RSS includes what the formulas (persistent state) leave out: each block's parameters gathered "
          "while it runs, gradients before their reduce-scatter, and here the whole model built on every rank "
          "before sharding (build it in configure_model to start on the meta device).")
    print("peak RSS = ru_maxrss of the worker (MiB), which includes torch itself; 'above start' = peak RSS "
          "minus the peak before the model was built.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--timeout", type=int, default=300, help="seconds a strategy may take before it is killed")
    parser.add_argument("--worker", choices=STRATEGIES, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker, args.out, steps=args.steps, width=args.width, depth=args.depth)
        return
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as root:
        for strategy in STRATEGIES:
            results[strategy] = run_strategy(strategy, os.path.join(root, strategy), args)
    psi = args.depth * (args.width * args.width + args.width) + args.width * CLASSES + CLASSES
    for strategy, ranks in results.items():
        steps = {r["steps"] for r in ranks}
        assert steps == {args.steps}, f"{strategy} ran {steps} steps, not {args.steps}"
    print_table(results, psi, args)


if __name__ == "__main__":
    main()
