"""Per-rank training-state memory under ddp, fsdp, pp=2 and tp=2, next to what each layout should hold.

One transformer-like model (an input Linear(64, D), ``--blocks`` residual blocks of LayerNorm +
Linear(D, 4D) + GELU + Linear(4D, D), a 10-class head: about 4.2M parameters at D=256, 8
blocks), Adam, generated data and ``--steps`` optimizer steps, under each layout on 2 CPU
processes (gloo):

    ddp   DDPStrategy                                  every rank the whole model
    fsdp  FSDPStrategy                                 every parameter's dim 0 split in 2 (FSDP2)
    pp    ModelParallelStrategy(pp=2, dp_shard=1,      each rank one pipeline stage: the parts the
          schedule="1F1B", microbatches=4)             balanced cut gives it
    tp    ModelParallelStrategy(tp=2, dp_shard=1)      by tensor_parallel_plan(): layers.*.up
                                                       column-wise, layers.*.down row-wise

Each rank measures, just before the last optimizer step (the moment parameters, gradients and
Adam's state all exist: the loop's ``zero_grad`` sets gradients to None after each step), the
bytes it holds locally of each (a DTensor counts its local shard, ``to_local()``; Adam's 0-dim
``step`` counters are left out, as in ``trainmesh.utilities.memory``). At the end of training the
ranks' figures are gathered to rank 0, which writes them for this script's parent to print.

The reference is the same model trained in one process (``devices=1``), measured the same way.
The expected fraction of it that a rank holds is computed from the model's parameter shapes, not
assumed: ddp 1; fsdp each parameter's dim-0 chunk (``torch.chunk`` sizes, as FSDP2 shards);
pp the parameter count of the rank's stage (the cut ``trainmesh`` makes: balanced by parameter
count); tp the column-wise layers' weights and biases and the row-wise layers' weights halved,
everything else (input layer, norms, row-wise biases, head) whole. Gradients and Adam's two
moments have their parameters' shapes, so one expected fraction holds for all three.

    python benchmarks/model_parallel_memory.py [--steps 3] [--dim 256] [--blocks 8] [--microbatches 4]

The parent runs one program per layout (``--worker LAYOUT --out FILE``); that program is the
elastic agent that re-runs itself as the 2 workers (the Trainer's own launcher).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.data.synthetic import make_classification_tensors
from trainmesh.strategies import ModelParallelStrategy
from trainmesh.strategies.pipeline_cut import split_parts
from trainmesh.utilities.memory import local_state_bytes

WORLD_SIZE, FEATURES, CLASSES, PER_RANK_BATCH = 2, 64, 10, 32
LAYOUTS = ("ddp", "fsdp", "pp", "tp")
KEYS = ("parameters", "gradients", "optimizer_state")
MiB = 2**20


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.down(F.gelu(self.up(self.norm(h))))


class TinyTransformer(tm.Module):
    """Input layer, residual MLP blocks, head; a forward that skips what a pipeline stage dropped."""

    def __init__(self, *, dim: int, blocks: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(FEATURES, dim)
        self.layers = nn.ModuleDict({str(i): Block(dim) for i in range(blocks)})
        self.head = nn.Linear(dim, CLASSES)
        self.memory: dict[str, int] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x) if self.inp is not None else x
        for block in self.layers.values():
            h = block(h)
        return self.head(h) if self.head is not None else h

    def tensor_parallel_plan(self):
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

        return {"layers.*.up": ColwiseParallel(), "layers.*.down": RowwiseParallel()}

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)

    def on_before_optimizer_step(self, optimizer) -> None:
        # Overwritten every step: what remains is the last step's, taken before it updates.
        self.memory = local_state_bytes(self.trainer.model, self.trainer.optimizers)


class GatherMemory(tm.Callback):
    """At the end of training: every rank's figures (and the parts it holds) to rank 0, which writes them."""

    def __init__(self, out: str | None) -> None:
        self.out = out

    def on_train_end(self, trainer, module) -> None:
        after = local_state_bytes(trainer.model, trainer.optimizers)
        figures = {
            **module.memory,
            "rank": trainer.global_rank,
            "steps": trainer.global_step,
            "parts": held_parts(module),
            # Sanity: after the last step parameters and optimizer state are as measured before
            # it (gradients are None by then: zero_grad(set_to_none=True)).
            "unchanged_after_step": all(after[k] == module.memory.get(k) for k in ("parameters", "optimizer_state")),
            "grads_after_training": after["gradients"],
        }
        ranks = [None] * WORLD_SIZE
        if dist.is_available() and dist.is_initialized():
            dist.all_gather_object(ranks, figures)
        else:
            ranks = [figures]
        if trainer.global_rank == 0 and self.out:
            with open(self.out, "w") as file:
                json.dump(ranks, file)


def held_parts(module: TinyTransformer) -> list[str]:
    parts = ["inp"] if module.inp is not None else []
    parts += [f"layers.{key}" for key in module.layers.keys()]
    return parts + (["head"] if module.head is not None else [])


def build_strategy(layout: str, microbatches: int):
    if layout == "pp":
        return ModelParallelStrategy(pp=WORLD_SIZE, dp_shard=1, schedule="1F1B", microbatches=microbatches)
    if layout == "tp":
        return ModelParallelStrategy(tp=WORLD_SIZE, dp_shard=1)
    return layout


def train(args: argparse.Namespace, *, strategy, devices: int, out: str | None) -> TinyTransformer:
    model = TinyTransformer(dim=args.dim, blocks=args.blocks)
    x, y = make_classification_tensors(WORLD_SIZE * PER_RANK_BATCH * args.steps, FEATURES, CLASSES, seed=0)
    trainer = tm.Trainer(
        accelerator="cpu",
        strategy=strategy,
        devices=devices,
        max_steps=args.steps,
        callbacks=[GatherMemory(out)],
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=PER_RANK_BATCH))
    return model


def run_worker(args: argparse.Namespace) -> None:
    """One layout's training; the first process becomes the agent of the 2 that run this."""
    warnings.filterwarnings("ignore")
    train(args, strategy=build_strategy(args.worker, args.microbatches), devices=WORLD_SIZE, out=args.out)


def run_layout(layout: str, out: str, args: argparse.Namespace) -> tuple[list[dict], float]:
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        layout,
        "--out",
        out,
        "--steps",
        str(args.steps),
        "--dim",
        str(args.dim),
        "--blocks",
        str(args.blocks),
        "--microbatches",
        str(args.microbatches),
    ]
    # One thread per worker: 2 workers on a small machine must not oversubscribe its cores.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    # Its own session, so that on timeout the agent and its workers go together.
    child = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = child.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        output, _ = child.communicate()
        raise SystemExit(f"{layout}: no result after {args.timeout}s; its output:\n{output}") from None
    if child.returncode != 0 or not os.path.exists(out):
        raise SystemExit(f"{layout}: exited with {child.returncode}; its output:\n{output}")
    with open(out) as file:
        return json.load(file), time.perf_counter() - start


# ---- what each rank should hold, from the model's parameter shapes -----------------------------
def expected_fractions(layout: str, model: TinyTransformer) -> tuple[list[float], str]:
    """The fraction of the whole model's parameters (and so gradients and Adam state) each rank holds."""
    params = dict(model.named_parameters())
    total = sum(p.numel() for p in params.values())
    if layout == "ddp":
        return [1.0] * WORLD_SIZE, "whole model"
    if layout == "fsdp":
        # FSDP2 shards dim 0 as torch.chunk does (rank 0 gets the larger chunk of an odd size).
        held = [
            sum(rows_of_chunk(p.shape[0], r) * (p.numel() // p.shape[0]) for p in params.values())
            for r in range(WORLD_SIZE)
        ]
        return [h / total for h in held], "dim-0 chunks"
    if layout == "pp":
        stages = split_parts(model, WORLD_SIZE, None)
        counts = [sum(p.numel() for part in parts for p in model.get_submodule(part).parameters()) for parts in stages]
        described = "; ".join(
            f"stage {i}: {span(parts)} = {c:,} params" for i, (parts, c) in enumerate(zip(stages, counts))
        )
        return [c / total for c in counts], described
    if layout == "tp":
        plan = model.tensor_parallel_plan()
        held = 0.0
        for name, p in params.items():
            owner, _, kind = name.rpartition(".")
            style = next((type(s).__name__ for pattern, s in plan.items() if fnmatch.fnmatchcase(owner, pattern)), None)
            split = style == "ColwiseParallel" or (style == "RowwiseParallel" and kind == "weight")
            held += p.numel() / WORLD_SIZE if split else p.numel()
        return [held / total] * WORLD_SIZE, "up/down weights, up biases halved"
    raise ValueError(layout)


def rows_of_chunk(rows: int, rank: int) -> int:
    chunks = torch.arange(rows).chunk(WORLD_SIZE)
    return len(chunks[rank]) if rank < len(chunks) else 0


def span(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{parts[0]}..{parts[-1]}"


def print_table(
    reference: dict[str, int],
    psi: int,
    results: dict[str, list[dict]],
    expected: dict,
    seconds: dict[str, float],
    args: argparse.Namespace,
) -> None:
    ref_total = sum(reference[k] for k in KEYS)
    print(
        f"model: Linear({FEATURES},{args.dim}) + {args.blocks} x [LayerNorm, Linear({args.dim},{4 * args.dim}), GELU, "
        f"Linear({4 * args.dim},{args.dim})] + Linear({args.dim},{CLASSES}); Ψ = {psi:,} parameters, fp32, Adam; "
        f"{args.steps} steps on {WORLD_SIZE} CPU processes (gloo)"
    )
    print(
        f"reference (one process, whole model): params {reference['parameters'] / MiB:.2f} MiB, grads "
        f"{reference['gradients'] / MiB:.2f} MiB, optim {reference['optimizer_state'] / MiB:.2f} MiB, total "
        f"{ref_total / MiB:.2f} MiB"
    )
    header = (
        f"{'layout':6s} {'rank':>4s} | {'param MiB':>9s} {'grad MiB':>9s} {'optim MiB':>9s} {'total MiB':>9s} | "
        f"{'fraction of reference p / g / o':>31s} {'total':>6s} | {'expected':>8s} | holds"
    )
    print(header)
    print("-" * len(header))
    for layout, ranks in results.items():
        fractions, _ = expected[layout]
        for figures in ranks:
            rank = figures["rank"]
            total = sum(figures[k] for k in KEYS)
            mib = " ".join(f"{figures[k] / MiB:9.2f}" for k in KEYS)
            frac = " / ".join(f"{figures[k] / reference[k]:.4f}" for k in KEYS)
            print(
                f"{layout:6s} {rank:4d} | {mib} {total / MiB:9.2f} | {frac:>31s} {total / ref_total:6.4f} | "
                f"{fractions[rank]:8.4f} | {span(figures['parts'])}"
            )
    for layout in results:
        print(f"expected {layout:5s}: {expected[layout][1]}")
    print(
        "wall time per layout (launch + 2 workers + training): "
        + ", ".join(f"{layout} {s:.1f}s" for layout, s in seconds.items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=4, help="pipeline micro-batches per batch (pp)")
    parser.add_argument("--timeout", type=int, default=150, help="seconds a layout may take before it is killed")
    parser.add_argument("--worker", choices=LAYOUTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return
    warnings.filterwarnings("ignore")
    start = time.perf_counter()
    reference_model = train(args, strategy="auto", devices=1, out=None)
    reference = reference_model.memory
    fresh = TinyTransformer(dim=args.dim, blocks=args.blocks)
    psi = sum(p.numel() for p in fresh.parameters())
    assert reference["parameters"] == 4 * psi, (reference, psi)
    expected = {layout: expected_fractions(layout, fresh) for layout in LAYOUTS}
    results: dict[str, list[dict]] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as root:
        for layout in LAYOUTS:
            results[layout], seconds[layout] = run_layout(layout, os.path.join(root, f"{layout}.json"), args)
    for layout, ranks in results.items():
        steps = {r["steps"] for r in ranks}
        assert steps == {args.steps}, f"{layout} ran {steps} steps, not {args.steps}"
        assert [r["rank"] for r in ranks] == list(range(WORLD_SIZE)), f"{layout}: ranks {[r['rank'] for r in ranks]}"
    print_table(reference, psi, results, expected, seconds, args)
    odd = [
        f"{layout} rank {r['rank']}"
        for layout, ranks in results.items()
        for r in ranks
        if not r["unchanged_after_step"]
    ]
    if odd:
        print(
            f"note: parameter or optimizer-state bytes changed between the last step and the end of training on: "
            f"{', '.join(odd)}"
        )
    print(f"total wall time {time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
