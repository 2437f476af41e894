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

A last line compares fsdp's automatic shard units with one unit for the whole model (peak RSS).

``--large``: the memory target of fsdp on a parameter-dominated model (a 117.5M-parameter
transformer at the defaults: 8 layers of width 1024, a vocabulary of 8192), built in
``configure_model`` (so on the meta device under the sharded strategies) and held as
``self.net``, with no ``wrap=``: the automatic units are what is measured. Each rank records the
peak resident memory of each phase (start: torch, trainmesh and the process group, before any
model; build; the first step; the later steps; after fit) and the table prints each strategy's
peak per rank and its ratio to ddp's, whole and above the start. ``fsdp-1unit`` is fsdp with
the whole model one unit, as ``self.net = Model()`` was sharded before units were chosen
automatically. About 4 minutes on 2 cores.

    python benchmarks/sharding_memory.py --large [--steps 3] [--width 1024] [--depth 8] [--vocab 8192]

The parent runs one program per strategy (``--worker STRATEGY --out FILE``); that program is
the elastic agent that re-runs itself as the 2 workers (so each strategy runs in fresh
processes, with what trainmesh's launcher gives its workers: torch's huge pages for fsdp on
CPU), and each worker writes its figures to ``FILE.rank{r}`` (JSON), which the parent reads back
to print one table, and the settings each strategy's workers ran under.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from isolated import settings as process_settings
from trainmesh.data.synthetic import make_classification_tensors
from trainmesh.memory_estimate import estimate_memory
from trainmesh.trainer.run_summary import count_shard_units
from trainmesh.utilities.memory import local_state_bytes

WORLD_SIZE, CLASSES, PER_RANK_BATCH = 2, 10, 32
STRATEGIES = ("ddp", "zero1", "sharded", "fsdp", "hsdp")
# --large: 2 sequences of 16 tokens per rank: activations stay small beside the parameters.
LARGE_SEQUENCE, LARGE_BATCH = 16, 2
LARGE_STRATEGIES = ("ddp", "zero1", "sharded", "fsdp", "fsdp-1unit")
MiB = 2**20


class WideNet(tm.Module):
    """Equal-size layers, so that every rank gets a similar share of every shard unit."""

    def __init__(self, *, width: int, depth: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.Sequential(
            *[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()) for _ in range(depth)]
        )
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


class TransformerLM(torch.nn.Module):
    """A parameter-dominated language model: token embeddings, ``depth`` transformer layers in a
    ``ModuleList``, a final norm and an output head (torchtitan's layout, torch's own layers)."""

    def __init__(self, *, vocab: int, width: int, depth: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.layers = torch.nn.ModuleList(
            [
                torch.nn.TransformerEncoderLayer(
                    width, width // 64, 4 * width, dropout=0.0, batch_first=True, norm_first=True
                )
                for _ in range(depth)
            ]
        )
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h))


class LargeLM(tm.Module):
    """The Lightning pattern: the module holds the real model as one attribute (``self.net``),
    built in ``configure_model`` (on the meta device under the sharded strategies)."""

    def __init__(self, *, vocab: int, width: int, depth: int) -> None:
        super().__init__()
        self.sizes = {"vocab": vocab, "width": width, "depth": depth}
        self.memory: dict[str, int] = {}
        self.phases = PhasePeaks()
        self.step_ends: list[float] = []

    def configure_model(self) -> None:
        torch.manual_seed(0)
        self.net = TransformerLM(**self.sizes)

    def training_step(self, batch, batch_idx):
        tokens, targets = batch
        return F.cross_entropy(self.net(tokens).flatten(0, 1), targets.flatten())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-4)

    def setup(self, stage: str) -> None:
        self.phases.close("start")  # torch, trainmesh and the process group, before any model

    def on_fit_start(self) -> None:
        self.phases.close("build")  # configure_model, sharding, materialising, the optimizers

    def on_before_optimizer_step(self, optimizer) -> None:
        self.memory = local_state_bytes(self.trainer.model, self.trainer.optimizers)

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        self.step_ends.append(time.perf_counter())
        if batch_idx == 0:
            self.phases.close("step 1")  # the first step allocates the gradients and Adam's state

    def on_train_end(self) -> None:
        self.phases.close("steps 2+")


def lm_parameters(vocab: int, width: int, depth: int) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in TransformerLM(vocab=vocab, width=width, depth=depth).parameters())


class PhasePeaks:
    """Peak resident memory of each phase of a run (KiB): the kernel's high-water mark (VmHWM),
    read and reset (``/proc/self/clear_refs``) at each phase's end. Their maximum is the
    run's peak, what ``ru_maxrss`` gives without the resets."""

    PHASES = ("start", "build", "step 1", "steps 2+", "end")

    def __init__(self) -> None:
        self.peaks: dict[str, int] = {}

    def close(self, phase: str) -> None:
        with open("/proc/self/status") as status:
            self.peaks[phase] = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets VmHWM (and ru_maxrss) to the current RSS


def make_strategy(name: str) -> Any:
    """A strategy name, or "fsdp-1unit": fsdp with the whole model as one unit (the default
    for a model held as ``self.net = Model()`` before units were chosen automatically)."""
    if name == "fsdp-1unit":
        from trainmesh.strategies.fsdp import FSDPStrategy

        return FSDPStrategy(min_num_params=2**62)  # no submodule is that large: the root only
    return name


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


def run_worker(strategy: str, out: str, args: argparse.Namespace) -> None:
    """One strategy's training; the first process becomes the agent of the 2 that run this."""
    warnings.filterwarnings("ignore")
    baseline_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # torch imported, no model yet
    steps = args.steps
    if args.large:
        model: Any = LargeLM(vocab=args.vocab, width=args.width, depth=args.depth)
        tokens = torch.randint(
            args.vocab,
            (WORLD_SIZE * LARGE_BATCH * steps, LARGE_SEQUENCE + 1),
            generator=torch.Generator().manual_seed(0),
        )
        data = TensorDataset(tokens[:, :-1], tokens[:, 1:])
        batch_size = LARGE_BATCH
    else:
        model = WideNet(width=args.width, depth=args.depth)
        data = TensorDataset(
            *make_classification_tensors(WORLD_SIZE * PER_RANK_BATCH * steps, args.width, CLASSES, seed=0)
        )
        batch_size = PER_RANK_BATCH
    trainer = tm.Trainer(
        accelerator="cpu",
        strategy=make_strategy(strategy),
        devices=WORLD_SIZE,
        max_steps=steps,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, DataLoader(data, batch_size=batch_size))
    figures = {
        **model.memory,
        "steps": trainer.global_step,
        "shard_units": count_shard_units(trainer.model),
        "settings": process_settings(),
    }
    if args.large:
        model.phases.close("end")
        step_times = [b - a for a, b in zip(model.step_ends, model.step_ends[1:])]
        figures.update(
            phases=model.phases.peaks,
            peak_rss_kib=max(model.phases.peaks.values()),
            step_s=statistics.median(step_times) if step_times else float("nan"),
            baseline_rss_kib=model.phases.peaks["start"],
        )
    else:
        figures.update(
            peak_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,  # KiB on Linux
            baseline_rss_kib=baseline_kib,
        )
    with open(f"{out}.rank{trainer.global_rank}", "w") as file:
        json.dump(figures, file)


def run_strategy(strategy: str, out: str, args: argparse.Namespace) -> list[dict]:
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        strategy,
        "--out",
        out,
        "--steps",
        str(args.steps),
        "--width",
        str(args.width),
        "--depth",
        str(args.depth),
        "--vocab",
        str(args.vocab),
        *(["--large"] if args.large else []),
    ]
    # One thread per worker: 2 workers on a small machine must not oversubscribe its cores.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # Its own session, so that on timeout the agent and its workers go together.
    child = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
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
    print(
        f"Ψ = {psi:,} parameters ({args.depth} x Linear({args.width}, {args.width}) + head), N = {n} CPU "
        f"processes (gloo), fp32 Adam (K = 8), {args.steps} steps; MiB per rank, (x ddp) = ratio to ddp's "
        "same rank"
    )
    header = (
        f"{'strategy':8s} {'rank':>4s} | {'params':>13s} {'grads':>13s} {'optim state':>13s} "
        f"{'total':>13s} | {'ZeRO formula':17s} {'MiB':>6s} {'meas/formula p g o':>20s} | "
        f"{'estimate':>8s} {'est/meas p g o total':>23s} | "
        f"{'peak RSS':>14s} {'above start':>11s}"
    )
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
            print(
                f"{strategy:8s} {rank:4d} | {' '.join(f'{c:>13s}' for c in cells)} | {text:17s} "
                f"{sum(expected.values()) / MiB:6.2f} {match:>20s} | "
                f"{estimate.state / MiB:8.2f} {ratios:>23s} | "
                f"{rss:6.0f} ({rss / (ddp['peak_rss_kib'] / 1024):4.2f}) {growth:11.0f}"
            )
    print(
        f"hsdp: with {n} processes on one node its default shard group S is both processes (a 1 x {n} "
        "mesh), so it is fsdp; a real 2-D mesh (replicate x shard, both > 1) needs at least 4 processes."
    )
    if "sharded" in results and results["sharded"][0]["parameters"] < 0.9 * 4 * psi:
        print(
            "sharded: FSDP2 keeps parameters whole only from forward to backward (reshard_after_forward="
            "False); post-backward reshards them (reshard_after_backward defaults to True) and Adam updates "
            "the shards, so at the step a rank holds 4Ψ/N of parameters, not ZeRO-2's 4Ψ."
        )
    print(
        "peak RSS includes what the formulas (persistent state) leave out: each block's parameters gathered "
        "while it runs, gradients before their reduce-scatter, and here the whole model built on every rank "
        "before sharding (build it in configure_model to start on the meta device)."
    )
    print(
        "peak RSS = ru_maxrss of the worker (MiB), which includes torch itself; 'above start' = peak RSS "
        "minus the peak before the model was built."
    )


def print_large_table(results: dict[str, list[dict]], psi: int, args: argparse.Namespace) -> None:
    """Each phase's peak RSS per rank, the run's peak, and its ratio to ddp's."""
    print(
        f"Ψ = {psi:,} parameters (TransformerLM: vocab {args.vocab}, width {args.width}, {args.depth} layers; "
        f"built in configure_model, held as self.net), N = {WORLD_SIZE} CPU processes (gloo), fp32 Adam, "
        f"{args.steps} steps of {LARGE_BATCH} x {LARGE_SEQUENCE} tokens per rank; MiB per rank"
    )
    phases = PhasePeaks.PHASES
    header = (
        f"{'strategy':10s} {'rank':>4s} {'units':>5s} | {'state p+g+o':>11s} | "
        + " ".join(f"{p:>8s}" for p in phases)
        + f" | {'peak':>6s} {'x ddp':>5s} | {'above start':>11s} {'x ddp':>5s}"
    )
    print(
        "phase peaks: start = torch + trainmesh + process group, before any model; build = configure_model, "
        "sharding, materialising, optimizers; step 1 = the first step (gradients and Adam state appear); "
        "end = after fit returns"
    )
    print(header)
    print("-" * len(header))
    for strategy, ranks in results.items():
        for rank, figures in enumerate(ranks):
            ddp = results["ddp"][rank]
            state = sum(figures[k] for k in ("parameters", "gradients", "optimizer_state"))
            peak, start = figures["peak_rss_kib"] / 1024, figures["baseline_rss_kib"] / 1024
            ddp_peak, ddp_start = ddp["peak_rss_kib"] / 1024, ddp["baseline_rss_kib"] / 1024
            cells = " ".join(f"{figures['phases'][p] / 1024:8.0f}" for p in phases)
            print(
                f"{strategy:10s} {rank:4d} {figures['shard_units']:5d} | {state / MiB:11.0f} | {cells} | {peak:6.0f} "
                f"{peak / ddp_peak:5.2f} | {peak - start:11.0f} {(peak - start) / (ddp_peak - ddp_start):5.2f}"
            )
    worst = max(r["peak_rss_kib"] / d["peak_rss_kib"] for r, d in zip(results["fsdp"], results["ddp"]))
    print(f"fsdp / ddp peak RSS per rank (worst rank): {worst:.2f} (target <= 0.60)")
    if "fsdp-1unit" in results:
        one = max(r["peak_rss_kib"] / d["peak_rss_kib"] for r, d in zip(results["fsdp-1unit"], results["ddp"]))
        print(
            f"fsdp-1unit / ddp: {one:.2f} (the whole model one shard unit, as self.net = Model() was sharded "
            "before units were chosen automatically; host memory released as fsdp now does on CPU)"
        )
    print(
        "units = FSDP2 units, the root included; state p+g+o = parameters + gradients + optimizer state held "
        "locally at the last step (DTensor shards counted locally)."
    )


def print_unit_comparison(results: dict[str, list[dict]]) -> None:
    """fsdp's automatic units against one unit for the whole model, peak RSS per rank."""
    auto, one = results["fsdp"], results["fsdp-1unit"]
    cells = ", ".join(
        f"rank {r}: {a['peak_rss_kib'] / 1024:.0f} vs {o['peak_rss_kib'] / 1024:.0f} MiB "
        f"({a['peak_rss_kib'] / o['peak_rss_kib']:.2f})"
        for r, (a, o) in enumerate(zip(auto, one))
    )
    print(f"fsdp, automatic units ({auto[0]['shard_units']} with the root) vs one unit for the whole model: {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--large",
        action="store_true",
        help="a >= 100M-parameter transformer built on the meta device, phase by phase peak RSS",
    )
    parser.add_argument("--steps", type=int, help="optimizer steps (default 10; 3 with --large)")
    parser.add_argument("--width", type=int, help="default 640; 1024 with --large")
    parser.add_argument("--depth", type=int, help="default 8 blocks; 8 transformer layers with --large")
    parser.add_argument("--vocab", type=int, default=8192, help="--large: the vocabulary size")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a strategy may take before it is killed")
    parser.add_argument("--worker", choices=STRATEGIES + LARGE_STRATEGIES, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.steps = args.steps or (3 if args.large else 10)
    args.width = args.width or (1024 if args.large else 640)
    args.depth = args.depth or 8
    if args.worker:
        run_worker(args.worker, args.out, args)
        return
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as root:
        for strategy in LARGE_STRATEGIES if args.large else STRATEGIES + ("fsdp-1unit",):
            results[strategy] = run_strategy(strategy, os.path.join(root, strategy), args)
    for strategy, ranks in results.items():
        steps = {r["steps"] for r in ranks}
        assert steps == {args.steps}, f"{strategy} ran {steps} steps, not {args.steps}"
    if args.large:
        print_large_table(results, lm_parameters(args.vocab, args.width, args.depth), args)
        print_settings(results)
        return
    one_unit = {"fsdp-1unit": results.pop("fsdp-1unit")}
    psi = args.depth * (args.width * args.width + args.width) + args.width * CLASSES + CLASSES
    print_table(results, psi, args)
    print_unit_comparison({**results, **one_unit})
    print_settings({**results, **one_unit})


def print_settings(results: dict[str, list[dict]]) -> None:
    """The process-wide settings each strategy's workers ran under (rank 0's): malloc, huge pages, threads."""
    for strategy, ranks in results.items():
        print(f"settings {strategy}: {ranks[0]['settings']}")


if __name__ == "__main__":
    main()
