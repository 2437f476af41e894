"""A Trainer fit's fixed cost (construction, setup, the first step's one-time work, teardown),
counted, for sources compared in fresh processes that alternate.

The fit: a 4-2 Linear module, one process (``one``) or ``strategy="ddp", devices=2`` under
torchrun (``ddp``, gloo), no logger, checkpoint, progress bar or summary: the tiny fits the test
suite runs by the thousand. In each process, after two warm-up fits, the Python calls of a fit
(``sys.setprofile``: Python functions and C functions called from Python) are counted for 1 and 2
steps; the fixed cost is ``calls(1) - (calls(2) - calls(1))``. CPU ms is the process time of a
1-step fit (median of ``--fits``; rank 0 for ddp), which the machine's load moves: prefer counts.

    python benchmarks/fit_fixed_cost.py --src /work/main/src src [--rounds 3] [--only one] [--top 15]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def _fit_function(kind: str) -> Any:
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    import trainmesh as tm

    class Tiny(tm.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return F.cross_entropy(self.layer(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    x, y = torch.randn(64, 4), torch.randint(0, 2, (64,))
    root = tempfile.mkdtemp()
    where = {"devices": 2, "strategy": "ddp"} if kind == "ddp" else {"devices": 1}

    def fit(steps: int) -> None:
        trainer = tm.Trainer(
            accelerator="cpu",
            max_steps=steps,
            enable_progress_bar=False,
            logger=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            default_root_dir=root,
            **where,
        )
        trainer.fit(Tiny(), DataLoader(TensorDataset(x, y), batch_size=4))

    return fit


def worker(kind: str, fits: int, out: str) -> None:
    """In the fit's process (each rank of ddp): count, time, and (rank 0) write the result."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("trainmesh").setLevel(logging.ERROR)
    fit = _fit_function(kind)
    fit(1), fit(2)  # warm-up: imports and first-call caches
    from step_breakdown import python_calls  # beside this script: its directory is on sys.path

    one, two = python_calls(lambda: fit(1)), python_calls(lambda: fit(2))
    fixed = one.copy()
    fixed.subtract(two - one)
    times = []
    for _ in range(fits):
        start = time.process_time()
        fit(1)
        times.append((time.process_time() - start) * 1000)
    if os.environ.get("RANK", "0") == "0":
        top = [(name, count) for name, count in fixed.most_common(40) if count > 0]
        result = {"fixed": sum(fixed.values()), "per_step": sum((two - one).values()), "cpu_ms": times, "top": top}
        with open(out, "w") as handle:
            json.dump(result, handle)


def measure(source: str, kind: str, fits: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "result.json")
        launch = [*TORCHRUN] if kind == "ddp" else []
        command = [sys.executable, *launch, os.path.abspath(__file__), "--worker", kind, "--fits", str(fits)]
        environment = {**os.environ, "PYTHONPATH": os.path.abspath(source), "FIXED_COST_OUT": out}
        environment.pop("MASTER_PORT", None)
        done = subprocess.run(command, capture_output=True, text=True, env=environment)
        if done.returncode != 0:
            raise SystemExit(f"{kind} with {source} failed:\n{done.stderr[-3000:]}")
        with open(out) as handle:
            result: dict[str, Any] = json.load(handle)
            return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", nargs="+", default=["src"], help="trainmesh source folders to compare")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fits", type=int, default=10)
    parser.add_argument("--only", nargs="+", choices=["one", "ddp"], default=["one", "ddp"])
    parser.add_argument("--top", type=int, default=0, help="list the fixed cost's most called functions")
    parser.add_argument("--worker", choices=["one", "ddp"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.fits, os.environ["FIXED_COST_OUT"])
        return
    results: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for round_ in range(args.rounds):
        sources = args.src if round_ % 2 == 0 else args.src[::-1]  # alternate the order
        for kind in args.only:
            for source in sources:
                results[(kind, source)].append(measure(source, kind, args.fits))
    for (kind, source), runs in results.items():
        fixed = statistics.median(run["fixed"] for run in runs)
        per_step = statistics.median(run["per_step"] for run in runs)
        cpu = statistics.median(statistics.median(run["cpu_ms"]) for run in runs)
        print(f"{kind:4} {source}: fixed calls {fixed:.0f}, per step {per_step:.0f}, CPU ms per 1-step fit {cpu:.1f}")
        for name, count in runs[-1]["top"][: args.top]:
            print(f"      {count:6} {name}")


if __name__ == "__main__":
    main()
