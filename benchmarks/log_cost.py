"""What ``self.log`` costs per call: the seed MLP logging 5 scalars on every training step
against the same run logging nothing.

Runs alternate (silent, logging[, lightning silent, lightning logging]) in one process, so
that machine noise hits every variant alike. Printed: the medians, their ratio, and the cost
per call, (median logging - median silent) / number of self.log calls. The 5 values are the
step's loss under 4 names and one Python float (the common case: default options, on_step in
training_step), so the figure is what self.log adds, not what computing a metric costs.

The logging runs also time their 5 calls from inside training_step (perf_counter around them):
the median of those per-step figures is printed too, as a second reading of the cost per call
that a busy machine disturbs less than a difference of whole runs.

Two Trainer set-ups: "lean" (no logger, progress bar, checkpointing or summary: the calls
alone) and "defaults" (``Trainer()`` as a user gets it: the values are also read, at the
loggers' ``log_every_n_steps`` and the progress bar's refresh).

    python benchmarks/log_cost.py [--samples 16384] [--repeats 9]

To measure code from another checkout (the before figure), put its ``src`` first:
``PYTHONPATH=/tmp/wt-log/src python benchmarks/log_cost.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from seed_mlp import MLPModule, lightning_mlp, one_epoch_options
from trainmesh.data.synthetic import make_classification_tensors

CALLS_PER_STEP = 5


# Seconds spent in each logging step's 5 calls, per Trainer set-up (timed from inside).
INSIDE: dict[str, list[float]] = {}


class LoggingMLP(MLPModule):
    """The seed MLP logging 5 scalars every step."""

    def __init__(self, inside: list[float]) -> None:
        super().__init__()
        self.inside = inside

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        start = time.perf_counter()
        self.log("loss_a", loss)
        self.log("loss_b", loss)
        self.log("loss_c", loss)
        self.log("loss_d", loss)
        self.log("lr", 1e-3)
        self.inside.append(time.perf_counter() - start)
        return loss


def lightning_module(*, logging: bool) -> Any:
    """The same pair for Lightning; None when lightning is not installed."""
    try:
        module = lightning_mlp()
    except ImportError:
        return None
    if logging:
        plain_step = module.training_step

        def training_step(batch: Any, batch_idx: int) -> torch.Tensor:
            loss = plain_step(batch, batch_idx)
            for name in ("loss_a", "loss_b", "loss_c", "loss_d"):
                module.log(name, loss)
            module.log("lr", 1e-3)
            return loss

        module.training_step = training_step
    return module


def trainmesh_run(loader: DataLoader, *, logging: bool, defaults: bool, root: str) -> None:
    torch.manual_seed(0)
    module = LoggingMLP(INSIDE.setdefault("defaults" if defaults else "lean", [])) if logging else MLPModule()
    tm.Trainer(**one_epoch_options(defaults=defaults, root=root)).fit(module, loader)


def lightning_run(loader: DataLoader, *, logging: bool, defaults: bool, root: str) -> None:
    import lightning as L

    torch.manual_seed(0)
    module = lightning_module(logging=logging)
    L.Trainer(**one_epoch_options(defaults=defaults, root=root)).fit(module, loader)


def timed(run: Callable[..., None], *args: Any, **kwargs: Any) -> float:
    # The runs' own output (model summary, progress bar, the start line) is not the benchmark's.
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull), contextlib.redirect_stderr(devnull):
        start = time.perf_counter()
        run(*args, **kwargs)
        return time.perf_counter() - start


def report(label: str, silent: list[float], logging: list[float], calls: int, inside: list[float] | None) -> None:
    s, g = statistics.median(silent), statistics.median(logging)
    paired = statistics.median(b - a for a, b in zip(silent, logging))
    line = (
        f"{label:20s} silent {s:.3f} s  logging {g:.3f} s  ratio {g / s:.3f}  "
        f"per self.log call {(g - s) / calls * 1e6:.2f} us (paired {paired / calls * 1e6:.2f} us)"
    )
    if inside:
        line += (
            f"; timed inside: median {statistics.median(inside) / CALLS_PER_STEP * 1e6:.2f} us, "
            f"mean {statistics.fmean(inside) / CALLS_PER_STEP * 1e6:.2f} us"
        )
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 = least noise)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    x, y = make_classification_tensors(args.samples, 784, 10, seed=0)
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    calls = len(loader) * CALLS_PER_STEP
    has_lightning = lightning_module(logging=False) is not None
    variants = [("trainmesh lean", trainmesh_run, False), ("trainmesh defaults", trainmesh_run, True)]
    if has_lightning:
        variants += [("lightning lean", lightning_run, False), ("lightning defaults", lightning_run, True)]
    times: dict[tuple[str, bool], list[float]] = {
        (name, logging): [] for name, _, _ in variants for logging in (False, True)
    }
    with tempfile.TemporaryDirectory() as root:
        for _, run, defaults in variants:  # warm-up: allocator, kernels, first-call imports
            timed(run, loader, logging=True, defaults=defaults, root=root)
        INSIDE.clear()
        for _ in range(args.repeats):
            for name, run, defaults in variants:
                for logging in (False, True):
                    times[(name, logging)].append(timed(run, loader, logging=logging, defaults=defaults, root=root))
    print(
        f"{len(loader)} steps per run, {CALLS_PER_STEP} self.log calls per step ({calls} per run), "
        f"{args.repeats} alternating runs each, torch threads={args.threads}"
    )
    for name, _, defaults in variants:
        inside = INSIDE.get("defaults" if defaults else "lean") if name.startswith("trainmesh") else None
        report(name, times[(name, False)], times[(name, True)], calls, inside)
    if not has_lightning:
        print("lightning: not installed (pip install lightning to compare)")


if __name__ == "__main__":
    main()
