"""The Trainer's CPU per step beside a raw PyTorch loop, each run in its own fresh process.

The seed's 784-128-10 MLP, batch 16, Adam, generated data, one epoch (``--samples`` / 16 steps).
Variants: ``raw`` (the loop of ``loop_overhead.raw_loop``), ``lean`` (the Trainer with extras off:
no progress bar, logger, checkpointing or summary) and ``defaults`` (``Trainer()`` as a user gets
it). Each run is a new process that runs its variant ``--epochs`` times (the first a warm-up),
and the variants alternate. Each process reports, for its timed epochs:

- the whole fit's CPU time (``process_time``: every thread) and wall time, the Trainer's
  construction included, as ``loop_overhead.py`` times a run;
- the median CPU time of a step (from one step's end to the next, so the loop's own work between
  steps is in it), which leaves out the fit's setup and teardown;
- Python function calls per step (``--calls``: counted with ``sys.setprofile`` over one epoch
  in a separate process; a count that the machine's load does not change).

    python benchmarks/loop_cpu.py [--repeats 5] [--samples 8192] [--calls]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from isolated import load, run_ranks, settings, spread, write_result
from seed_mlp import MLPModule, build_mlp, one_epoch_options
from trainmesh.data.synthetic import make_classification_tensors

VARIANTS = ("raw", "lean", "defaults")


class Marks(tm.Callback):
    def __init__(self, marks: list[float]) -> None:
        self.marks = marks

    def on_train_batch_end(self, *args: object) -> None:
        self.marks.append(time.process_time())


def raw_epoch(loader: DataLoader, marks: list[float]) -> None:
    torch.manual_seed(0)
    model = build_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        marks.append(time.process_time())


def trainer_epoch(loader: DataLoader, marks: list[float], *, defaults: bool, root: str) -> None:
    torch.manual_seed(0)
    trainer = tm.Trainer(**one_epoch_options(defaults=defaults, root=root), callbacks=[Marks(marks)])
    trainer.fit(MLPModule(), loader)


def count_calls(run: Any) -> int:
    """Python function calls (and C functions called from Python) made by ``run()``."""
    calls = [0]

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            calls[0] += 1

    sys.setprofile(profiler)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls[0]


def worker(args: argparse.Namespace) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    x, y = make_classification_tensors(args.samples, 784, 10, seed=0)
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    marks: list[float] = []
    figures: dict[str, Any] = {"runs": []}
    with tempfile.TemporaryDirectory() as root:
        if args.worker == "raw":
            run = lambda: raw_epoch(loader, marks)  # noqa: E731
        else:
            run = lambda: trainer_epoch(loader, marks, defaults=args.worker == "defaults", root=root)  # noqa: E731
        run()  # warm-up: first-call imports, kernels, the allocator
        for _ in range(args.epochs - 1):
            marks.clear()
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            steps = [b - a for a, b in zip(marks, marks[1:])]
            figures["runs"].append(
                {
                    "cpu": time.process_time() - cpu,
                    "wall": time.perf_counter() - wall,
                    "step_cpu": statistics.median(steps),
                }
            )
        if args.count_calls:  # after the timed epochs, which it would slow
            figures["calls_per_step"] = count_calls(run) / len(loader)
    write_result(args.out, 0, {**figures, "settings": settings()})


def report(args: argparse.Namespace, runs: dict[str, list[dict]]) -> None:
    steps = args.samples // 16
    print(
        f"seed MLP, {steps} steps per epoch, {args.repeats} processes per variant (alternating), "
        f"{args.epochs - 1} timed epochs each after a warm-up; torch threads={args.threads}; {load()}"
    )
    print("median (min-max) over processes of each process's median; ratios paired with the raw process beside it")
    base = runs["raw"]

    def value(process: dict, key: str) -> float:
        return statistics.median(r[key] for r in process["runs"])

    for name, processes in runs.items():
        cells = []
        for key, label, scale in (("cpu", "fit CPU", 1), ("wall", "fit wall", 1), ("step_cpu", "step CPU", 1e6)):
            values = [value(p, key) for p in processes]
            ratios = [v / value(b, key) for v, b in zip(values, base)]
            unit = "us" if scale > 1 else "s"
            cells.append(f"{label} {spread(values, scale, 0 if scale > 1 else 3)} {unit} x{spread(ratios)}")
        if "calls_per_step" in processes[0]:
            cells.append(f"calls/step {spread([p['calls_per_step'] for p in processes], digits=0)}")
        print(f"{name:9s} " + " | ".join(cells))
    print("targets: lean <= 1.05, defaults <= 1.10 (CPU)")
    for name, processes in runs.items():
        print(f"settings {name}: {processes[0]['settings']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4, help="per process, the first a warm-up")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", action="store_true", help="also count Python calls per step")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--count-calls", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    shared = ["--samples", str(args.samples), "--epochs", str(args.epochs), "--threads", str(args.threads)]
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for repeat in range(args.repeats):
        order = VARIANTS[repeat % 3 :] + VARIANTS[: repeat % 3]  # no variant always after the same one
        for name in order:
            count = ["--count-calls"] if args.calls and repeat == 0 else []
            (result,) = run_ranks(
                os.path.abspath(__file__),
                [*shared, *count, "--worker", name],
                world=1,
                timeout=600,
                env={"OMP_NUM_THREADS": str(args.threads)},
                launcher=False,
            )
            runs[name].append(result)
    if args.calls:
        for processes in runs.values():
            for process in processes[1:]:
                process["calls_per_step"] = processes[0]["calls_per_step"]
    report(args, runs)


if __name__ == "__main__":
    main()
