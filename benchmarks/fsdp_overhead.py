"""Trainer(strategy="fsdp") vs a hand-written FSDP2 loop, each run in its own fresh processes.

The model is a parameter-dominated transformer language model (``sharding_memory.TransformerLM``:
token embeddings, ``--depth`` torch ``TransformerEncoderLayer``s, a norm and an output head),
built on the meta device; 2 CPU processes (gloo), ``--batch`` sequences of 16 tokens per rank,
Adam. ``--model 55m`` is width 768 and 6 layers, ``--model 117m`` width 1024 and 8 layers
(vocabulary 8192 both).

- ``hand``: what torchtitan and the FSDP2 tutorial write: ``fully_shard`` on each layer, the
  embeddings, the head, then the whole model; ``to_empty`` and an initialisation;
  ``DistributedSampler(shuffle=False)``; forward, cross-entropy, ``zero_grad``, backward, step.
  Nothing else: glibc's malloc as it comes.
- ``fsdp``: the same model built in ``configure_model`` and trained by ``Trainer(strategy="fsdp")``
  (its automatic shard units are those same modules), extras off.
- ``ddp``: the same under ``Trainer(strategy="ddp")``: the memory reference.

Every run of every variant is a new pair of processes (``isolated.run_ranks``), the variants
alternate, and each rank measures itself: per step (after ``--warmup`` steps) CPU time (summed
over the ranks), wall time, minor page faults (summed), and its peak resident memory. A variant
may name malloc settings after ``@`` (for studying them; the same settings then hold in both
ranks from the start):

    glibc          trainmesh's own host-memory policy turned off: glibc's defaults
    mmap=N         mallopt(M_MMAP_THRESHOLD, N MiB) before the model is built
    later=N        mallopt(M_MMAP_THRESHOLD, N MiB) after the first optimizer step
    arenas=N       mallopt(M_ARENA_MAX, N): at most N malloc arenas (threads share them)
    trimat=N       mallopt(M_TRIM_THRESHOLD, N MiB): free memory above N MiB at the heap's top goes back
    trim           malloc_trim(0) after every optimizer step
    thp            THP_MEM_ALLOC_ENABLE=1 (torch: tensors of 2 MiB and more on transparent huge pages)
    nothp          THP_MEM_ALLOC_ENABLE=0: torch's huge pages off, as in processes that torchrun starts
                   (the trainmesh variants otherwise get what trainmesh's launcher gives its workers)
    hugetlb        GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (glibc: its mappings on transparent huge pages)
    release        FSDPStrategy(release_host_memory=True): release freed host memory even without huge pages

Without ``glibc`` or ``mmap=``, trainmesh's own policy holds (FSDPStrategy's ``release_host_memory``).

e.g. ``--variants hand fsdp hand@mmap=4 fsdp@glibc``. The settings each variant ran under are
printed with its figures.

    python benchmarks/fsdp_overhead.py [--model 55m] [--repeats 3] [--steps 6] [--variants hand fsdp ddp]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import trainmesh as tm
from isolated import load, mark, peak_rss_kib, reset_peak, run_figures, run_ranks, settings, spread, write_result
from sharding_memory import TransformerLM, lm_parameters

WORLD_SIZE, SEQUENCE = 2, 16
MODELS = {"55m": {"vocab": 8192, "width": 768, "depth": 6}, "117m": {"vocab": 8192, "width": 1024, "depth": 8}}
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
PHASE_KEYS = ("cpu", "sys", "minflt")


class Recorder:
    """Marks at the loop's start and each step's end; the peak before and after the warm-up; each
    phase's CPU and minor faults summed over the steps after the warm-up (``PHASES``: forward and
    loss; backward; optimizer step, zero_grad and the variant's after-step setting)."""

    def __init__(self, warmup: int, after_step: Callable[[int], None]) -> None:
        self.warmup, self.after_step = warmup, after_step
        self.marks: list[dict[str, float]] = []
        self.early_peak = 0
        self.phases = {name: {"cpu": 0.0, "sys": 0.0, "minflt": 0.0} for name in PHASES}
        self.last: dict[str, float] = {}
        self.index = 0

    def start(self) -> None:
        self.marks = [mark()]
        self.last = self.marks[0]

    def phase(self, name: str) -> None:
        """The phase ``name`` ends now."""
        now = mark()
        if self.index >= self.warmup:
            for key, total in self.phases[name].items():
                self.phases[name][key] = total + now[key] - self.last[key]
        self.last = now

    def step_end(self, index: int) -> None:
        self.index = index
        self.after_step(index)
        self.phase("optimizer")
        self.marks.append(self.last)
        self.index = index + 1
        if index + 1 == self.warmup:
            self.early_peak = peak_rss_kib()  # build and the warm-up steps
            reset_peak()

    def figures(self) -> dict[str, Any]:
        steady = peak_rss_kib()
        return {
            "marks": self.marks,
            "peak_rss_kib": max(self.early_peak, steady),
            "steady_peak_rss_kib": steady,
            "phases": self.phases,
        }


PHASES = ("forward", "backward", "optimizer")


def malloc_policy(spec: str) -> tuple[Callable[[int], None], dict[str, Any]]:
    """Apply a variant's malloc settings (those of the module's docstring, joined by ``+``) and
    return what to run after each step, and the settings to print."""
    parts = [part for part in spec.split("+") if part]
    libc = ctypes.CDLL("libc.so.6")
    if any(part == "glibc" or part.startswith("mmap=") for part in parts):
        import trainmesh.strategies.fsdp as fsdp_module

        fsdp_module.release_large_frees = lambda *args, **kwargs: False  # type: ignore[assignment]
    trim, later = False, 0
    for part in parts:
        if part.startswith("mmap="):
            assert libc.mallopt(_M_MMAP_THRESHOLD, int(float(part[5:]) * 2**20))
        elif part.startswith("later="):
            later = int(float(part[6:]) * 2**20)
        elif part.startswith("trimat="):
            assert libc.mallopt(_M_TRIM_THRESHOLD, int(float(part[7:]) * 2**20))
        elif part.startswith("arenas="):
            assert libc.mallopt(_M_ARENA_MAX, int(part[7:]))
        elif part == "trim":
            trim = True
        elif part not in ("glibc", "thp", "nothp", "hugetlb", "release"):
            raise SystemExit(f"unknown setting {part!r}")

    def after_step(index: int) -> None:
        if later and index == 0:
            assert libc.mallopt(_M_MMAP_THRESHOLD, later)
        if trim:
            libc.malloc_trim(0)

    return after_step, ({"benchmark_settings": spec} if spec else {})


def variant_env(name: str) -> dict[str, str]:
    """The environment a variant's processes start with: for trainmesh's variants what its
    launcher gives the workers it starts (``Strategy.processes.environment``: torch's huge pages
    for fsdp on CPU), as ``Trainer(devices=2)`` run with python would; then the settings' own."""
    kind, _, spec = name.partition("@")
    parts = spec.split("+")
    env: dict[str, str] = {}
    if kind != "hand":
        from trainmesh.strategies import build_strategy
        from trainmesh.strategies.protocol import Placement

        env.update(build_strategy(kind, Placement(device_type="cpu", devices=(0, 1))).processes.environment)
    if "thp" in parts:
        env["THP_MEM_ALLOC_ENABLE"] = "1"
    if "nothp" in parts:
        env["THP_MEM_ALLOC_ENABLE"] = "0"  # as under torchrun, where nobody set it
    return {**env, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"} if "hugetlb" in parts else env


def token_data(args: argparse.Namespace) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(args.vocab, (WORLD_SIZE * args.batch * args.steps, SEQUENCE + 1), generator=generator)
    return TensorDataset(tokens[:, :-1], tokens[:, 1:])


def hand_fsdp(args: argparse.Namespace, recorder: Recorder) -> None:
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with torch.device("meta"):
        model = TransformerLM(vocab=args.vocab, width=args.width, depth=args.depth)
    for unit in [*model.layers, model.embed, model.head]:
        fully_shard(unit)
    fully_shard(model)
    model.to_empty(device="cpu")
    torch.manual_seed(rank)
    with torch.no_grad():
        for p in model.parameters():
            p.to_local().normal_(std=0.02)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    data = token_data(args)
    sampler = DistributedSampler(data, num_replicas=WORLD_SIZE, rank=rank, shuffle=False)
    recorder.start()
    for index, (tokens, targets) in enumerate(DataLoader(data, sampler=sampler, batch_size=args.batch)):
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        recorder.phase("forward")
        loss.backward()
        recorder.phase("backward")
        optimizer.step()
        recorder.step_end(index)
    dist.destroy_process_group()


class LM(tm.Module):
    def __init__(self, args: argparse.Namespace, recorder: Recorder) -> None:
        super().__init__()
        self.sizes = {"vocab": args.vocab, "width": args.width, "depth": args.depth}
        self.recorder = recorder

    def configure_model(self) -> None:
        torch.manual_seed(0)
        self.net = TransformerLM(**self.sizes)

    def training_step(self, batch, batch_idx):
        tokens, targets = batch
        return F.cross_entropy(self.net(tokens).flatten(0, 1), targets.flatten())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-4)

    def on_train_batch_start(self, batch, batch_idx) -> None:
        if batch_idx == 0:
            self.recorder.start()

    def on_before_backward(self, loss) -> None:
        self.recorder.phase("forward")

    def on_before_optimizer_step(self, optimizer) -> None:
        self.recorder.phase("backward")

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        self.recorder.step_end(batch_idx)


def trainer_run(strategy: str, args: argparse.Namespace, recorder: Recorder) -> None:
    kind, _, spec = strategy.partition("@")
    if kind == "fsdp" and "release" in spec.split("+"):
        from trainmesh.strategies.fsdp import FSDPStrategy

        chosen: Any = FSDPStrategy(release_host_memory=True)
    else:
        chosen = kind
    trainer = tm.Trainer(
        accelerator="cpu",
        strategy=chosen,
        devices=WORLD_SIZE,
        max_steps=args.steps,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    trainer.fit(LM(args, recorder), DataLoader(token_data(args), batch_size=args.batch))


def worker(args: argparse.Namespace) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    kind, _, spec = args.worker.partition("@")
    after_step, extra = malloc_policy(spec)
    recorder = Recorder(args.warmup, after_step)
    if kind == "hand":
        hand_fsdp(args, recorder)
    else:
        trainer_run(args.worker, args, recorder)
    write_result(args.out, int(os.environ["RANK"]), {**recorder.figures(), "settings": settings(extra)})


def report(args: argparse.Namespace, runs: dict[str, list[dict]]) -> None:
    base = runs[args.variants[0]]
    ddp = runs.get("ddp")
    print(
        f"{args.model}: {lm_parameters(args.vocab, args.width, args.depth) / 1e6:.1f}M parameters "
        f"(width {args.width}, {args.depth} layers, vocab {args.vocab}), {WORLD_SIZE} processes (gloo) x "
        f"{args.batch} x {SEQUENCE} tokens, Adam; {args.steps} steps per run, the first {args.warmup} left out; "
        f"{args.repeats} runs per variant, each in fresh processes, alternating; {load()} at the end"
    )
    print(
        "per step: CPU (user + system) summed over ranks, wall on rank 0, minor faults summed; median over steps, then"
    )
    print("median (min-max) over runs; ratios are paired (each run against the first variant's run beside it)")
    for name, figures in runs.items():
        cpu = spread([f["cpu"] for f in figures])
        wall = spread([f["wall"] for f in figures])
        faults = spread([f["minflt"] for f in figures], 1e-3, 0)
        system = spread([f.get("sys", 0.0) for f in figures], digits=2)
        cpu_ratio = spread([f["cpu"] / b["cpu"] for f, b in zip(figures, base)])
        wall_ratio = spread([f["wall"] / b["wall"] for f, b in zip(figures, base)])
        peak = spread([f["peak_mib"] for f in figures], digits=0)
        line = (
            f"{name:18s} CPU {cpu} s  x{cpu_ratio} (system {system}) | wall {wall} s  x{wall_ratio} | "
            f"faults {faults}k | "
            f"peak RSS/rank {peak} MiB (after warm-up {spread([f['steady_peak_mib'] for f in figures], digits=0)})"
        )
        if ddp is not None:
            line += f"  x ddp {spread([f['peak_mib'] / d['peak_mib'] for f, d in zip(figures, ddp)], digits=2)}"
        print(line)
    print("per phase and step (mean over the steps after the warm-up, summed over ranks; median over runs):")
    for name, figures in runs.items():
        parts = [
            f"{phase} CPU {statistics.median(f['phases'][phase]['cpu'] for f in figures):.3f} s "
            f"(system {statistics.median(f['phases'][phase]['sys'] for f in figures):.3f}) "
            f"faults {statistics.median(f['phases'][phase]['minflt'] for f in figures) / 1e3:.0f}k"
            for phase in PHASES
        ]
        print(f"{name:18s} " + " | ".join(parts))
    for name, figures in runs.items():
        print(f"settings {name}: {figures[0]['settings']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, default="55m")
    parser.add_argument("--variants", nargs="+", default=["hand", "fsdp"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2, help="first steps left out (Adam's state appears in step 1)")
    parser.add_argument("--batch", type=int, default=2, help="sequences of 16 tokens per rank and step")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for key, value in MODELS[args.model].items():
        setattr(args, key, value)
    if args.worker:
        worker(args)
        return
    runs: dict[str, list[dict]] = {name: [] for name in args.variants}
    shared = ["--model", args.model, "--steps", str(args.steps), "--warmup", str(args.warmup)]
    shared += ["--batch", str(args.batch), "--threads", str(args.threads)]
    for repeat in range(args.repeats):
        for name in args.variants:
            ranks = run_ranks(
                os.path.abspath(__file__),
                [*shared, "--worker", name],
                world=WORLD_SIZE,
                timeout=args.timeout,
                env={"OMP_NUM_THREADS": str(args.threads), **variant_env(name)},
            )
            phases = {
                phase: {k: sum(r["phases"][phase][k] for r in ranks) / (args.steps - args.warmup) for k in PHASE_KEYS}
                for phase in PHASES
            }
            runs[name].append({**run_figures(ranks, args.warmup), "settings": ranks[0]["settings"], "phases": phases})
            print(f"run {repeat + 1} {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    report(args, runs)


if __name__ == "__main__":
    main()
