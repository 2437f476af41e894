"""Where a Trainer step's extra work goes beside the raw loop: counts, not times, so that the
machine's load does not change them.

For ``loop_cpu.py``'s raw loop and its Trainer with extras off (``lean``) or as a user gets it
(``defaults``), each in its own fresh process, the difference between an epoch of ``2N`` steps
and one of ``N`` steps (so that the fit's setup cancels), divided by ``N``:

- Python calls per step by function (``sys.setprofile``: Python functions and C functions called
  from Python), the functions whose count differs from the raw loop's listed with the file;
- aten ops per step by op (a ``TorchDispatchMode``: forward, backward and the optimizer's ops).

    python benchmarks/step_breakdown.py [--variant lean] [--steps 64]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader, TensorDataset

import loop_cpu
from trainmesh.data.synthetic import make_classification_tensors


class _Ops(TorchDispatchMode):
    def __init__(self, counts: collections.Counter) -> None:
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.counts[str(func)] += 1
        return func(*args, **(kwargs or {}))


def _epoch(variant: str, steps: int, root: str) -> Callable[[], None]:
    x, y = make_classification_tensors(steps * 16, 784, 10, seed=0)
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    marks: list[float] = []
    if variant == "raw":
        return lambda: loop_cpu.raw_epoch(loader, marks)
    return lambda: loop_cpu.trainer_epoch(loader, marks, defaults=variant == "defaults", root=root)


def python_calls(run: Callable[[], None]) -> collections.Counter:
    """The Python and C calls ``run()`` makes, by function (file:line name), from ``sys.setprofile``;
    also fit_fixed_cost.py's counter."""
    counts: collections.Counter = collections.Counter()
    prefix = os.path.dirname(os.path.dirname(torch.__file__)) + os.sep

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            counts[f"{code.co_filename.replace(prefix, '')}:{code.co_firstlineno} {code.co_name}"] += 1
        elif event == "c_call":
            counts[f"C {getattr(arg, '__qualname__', repr(arg))}"] += 1

    sys.setprofile(profiler)
    try:
        run()
    finally:
        sys.setprofile(None)
    return counts


def _ops(run: Callable[[], None]) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    with _Ops(counts):
        run()
    return counts


def worker(variant: str, steps: int, out: str) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as root:
        short, long = _epoch(variant, steps, root), _epoch(variant, 2 * steps, root)
        short(), long()  # warm-up: first-call imports, caches
        for name, count in (("calls", python_calls), ("ops", _ops)):
            a, b = count(short), count(long)
            figures[name] = {k: (b[k] - a[k]) / steps for k in set(a) | set(b) if b[k] != a[k]}
    with open(out, "w") as file:
        json.dump(figures, file)


def _run(variant: str, steps: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "figures.json")
        command = [sys.executable, os.path.abspath(__file__), "--worker", variant, "--steps", str(steps), "--out", out]
        subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        with open(out) as file:
            figures: dict[str, dict[str, float]] = json.load(file)
            return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=("lean", "defaults"), default="lean")
    parser.add_argument("--steps", type=int, default=64, help="N: the epochs are N and 2N steps")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.out)
        return
    raw, trainer = _run("raw", args.steps), _run(args.variant, args.steps)
    for name in ("calls", "ops"):
        base, ours = raw[name], trainer[name]
        print(f"{name} per step: raw {sum(base.values()):.1f}, {args.variant} {sum(ours.values()):.1f}")
        rows = sorted(((ours.get(k, 0) - base.get(k, 0), k) for k in set(base) | set(ours)), reverse=True)
        for extra, key in rows:
            if abs(extra) >= 0.5:
                print(f"  {extra:+6.1f}  {key}")


if __name__ == "__main__":
    main()
