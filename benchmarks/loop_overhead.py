"""Trainer vs a raw PyTorch loop: the time the Trainer adds to a training epoch.

The seed's 784-128-10 MLP, batch 16, Adam, on generated data, one epoch per run. Runs
alternate (raw, trainer-lean, trainer-defaults[, lightning]) in one process so that machine
noise hits every variant alike; the medians' ratios are printed.

    python benchmarks/loop_overhead.py [--samples 16384] [--repeats 9] [--monitor-pairs 12]
    python benchmarks/loop_overhead.py --compile [inductor|aot_eager] [--repeats 3]

``--compile`` measures instead the step time of ``Trainer(compile=...)`` against eager on a
small transformer (2 encoder layers, d=64, sequence 32, batch 16): the median step after the
first 10 (compilation and warm-up excluded), in alternating runs.

Every variant here runs in one process, so one variant's process-wide aftermath (heap layout,
caches) reaches the next: ``loop_cpu.py`` measures the same variants each in its own fresh
process, in CPU time per step and calls per step.

"lean" is the Trainer with extras off (no progress bar, logger, checkpointing, summary);
"defaults" is ``Trainer()`` as a user gets it (progress bar, CSV logger, a checkpoint at
the epoch's end, model summary).

The ThroughputMonitor that the defaults bring costs a little every step and once per fit (its
first step, when FLOPs are counted). Its figure against the 2% target is measured inside default
fits: the time spent in its hooks, where they run, plus the first step's extra time against fits
without it. Two cross-checks see what no timer inside it can, with the machine's noise: default
fits in which it is taken out of the hook lists and put back every 50 steps (MonitorSwitch), each
block with it against the block without it that follows; and whole default runs with and without
it, in back-to-back pairs. Both are printed with a bootstrap 95% interval: on a shared machine one
run's speed differs from the next by 10% or more, one block's from the next by about 1%.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import tempfile
import time
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from seed_mlp import MLPModule, build_mlp, lightning_mlp, one_epoch_options
from trainmesh.callbacks import ThroughputMonitor
from trainmesh.data.synthetic import make_classification_tensors

# Steps in a block with, or without, the ThroughputMonitor (MonitorSwitch): the default
# log_every_n_steps, and switched halfway between two logging steps, so that every block with
# the monitor holds one of its window closes, as often as a run has them.
BLOCK = 50


def raw_loop(loader: DataLoader) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    return model


def trainer_loop(loader: DataLoader, *, defaults: bool, root: str) -> torch.nn.Module:
    torch.manual_seed(0)
    module = MLPModule()
    trainer = tm.Trainer(**one_epoch_options(defaults=defaults, root=root))
    trainer.fit(module, loader)
    return module.net


def lightning_loop(loader: DataLoader, *, root: str) -> torch.nn.Module | None:
    try:
        import lightning as L
    except ImportError:
        return None

    torch.manual_seed(0)
    module = lightning_mlp()
    L.Trainer(**one_epoch_options(defaults=False, root=root)).fit(module, loader)
    return module.net


class StepTimes(tm.Callback):
    """The time of each training step (from one batch's end to the next)."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_train_batch_end(self, *args: object) -> None:
        self.ends.append(time.perf_counter())


class SmallTransformer(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def step_time(loader: DataLoader, compile: bool | dict, *, skip: int = 10) -> float:
    """Median seconds per step of one fit, past its first ``skip`` steps."""
    timer = StepTimes()
    trainer = tm.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[timer],
        compile=compile,
    )
    trainer.fit(SmallTransformer(), loader)
    return statistics.median(b - a for a, b in zip(timer.ends[skip:], timer.ends[skip + 1 :]))


def compare_compile(backend: str, repeats: int) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16 * 60, 32, 64, generator=g)
    loader = DataLoader(TensorDataset(x, torch.randint(0, 10, (len(x),), generator=g)), batch_size=16)
    eager, compiled = [], []
    for _ in range(repeats):  # alternating, so machine noise hits both alike
        eager.append(step_time(loader, False))
        compiled.append(step_time(loader, {"backend": backend}))
    e, c = statistics.median(eager), statistics.median(compiled)
    print(
        f"small transformer, {len(loader)} steps per run, {repeats} alternating runs each, torch threads="
        f"{torch.get_num_threads()}"
    )
    print(f"eager                median {e * 1e3:.2f} ms/step")
    print(f"compile={backend:12s} median {c * 1e3:.2f} ms/step  ratio compiled/eager {c / e:.3f}")


class FirstStep(tm.Callback):
    """When the first epoch starts and each of its first two batches start (put first among the
    callbacks: its hooks run before any other's, the monitor's FLOP count starting included)."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def on_train_epoch_start(self, *args: object) -> None:
        self.stamps.append(time.perf_counter())

    def on_train_batch_start(self, *args: object) -> None:
        self.stamps.append(time.perf_counter())

    @property
    def seconds(self) -> float:
        """From the epoch's start to the second batch's: the first batch's wait, step and hooks."""
        return self.stamps[2] - self.stamps[0]


def time_inside(monitor: ThroughputMonitor) -> list[float]:
    """Wrap the monitor's hooks (on the instance) to add up the seconds spent in them, where they
    run: inside a fit, after a step's kernels, Python code runs slower than in a tight loop."""
    spent = [0.0]
    for hook in (
        "on_train_start",
        "on_train_epoch_start",
        "on_train_batch_end",
        "on_validation_start",
        "on_validation_end",
        "on_train_epoch_end",
        "on_train_end",
    ):

        def timed_hook(*args: Any, _hook: Any = getattr(monitor, hook)) -> None:  # noqa: B008 binds this hook
            start = time.perf_counter()
            _hook(*args)
            spent[0] += time.perf_counter() - start

        setattr(monitor, hook, timed_hook)
    return spent


def default_run(loader: DataLoader, root: str, *, monitor: bool) -> tuple[float, float, float]:
    """One default fit with or without the ThroughputMonitor: (whole run, first step, time inside
    the monitor's hooks) in seconds. The first step, from the epoch's start to the second batch's,
    holds the whole FLOP count (started, run under, ended)."""
    first = FirstStep()
    torch.manual_seed(0)
    trainer = tm.Trainer(**one_epoch_options(defaults=True, root=root))
    trainer.callbacks = [first] + [cb for cb in trainer.callbacks if monitor or not isinstance(cb, ThroughputMonitor)]
    spent = [0.0]
    if monitor:
        spent = time_inside(next(cb for cb in trainer.callbacks if isinstance(cb, ThroughputMonitor)))
    seconds, _ = timed(trainer.fit, MLPModule(), loader)
    return seconds, first.seconds, spent[0]


def paired_default_runs(loader: DataLoader, root: str, pairs: int) -> dict[bool, list[tuple[float, float, float]]]:
    """``default_run`` with and without the monitor in back-to-back pairs; the pair's first run
    alternates, so that a run's aftermath (files written, caches) hits both alike."""
    runs: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    for pair in range(pairs):
        for monitor in (True, False) if pair % 2 == 0 else (False, True):
            runs[monitor].append(default_run(loader, root, monitor=monitor))
    return runs


class MonitorSwitch(tm.Callback):
    """Takes the default ThroughputMonitor out of the Trainer's hook lists every ``block`` steps, and
    puts it back after the next ``block``, stamping each step's end: one fit then times steps with
    and without the monitor side by side, too close in time for the machine's speed to differ.

    It reaches into ``trainer.hooks`` (a benchmark may; nothing else should): out of the hook
    dispatcher's lists, the monitor is not called at all. Put first
    among the callbacks, so that the monitor's place in the batch-end list comes after it: the state
    set at one step's end then holds for everything until the next step's end."""

    def __init__(self, block: int) -> None:
        self.block = block
        self.ends: list[float] = []
        self.present: list[bool] = []  # whether the monitor ran in the step ending at ends[i + 1]

    def on_train_start(self, trainer: Any, module: Any) -> None:
        self.monitor = next(cb for cb in trainer.callbacks if isinstance(cb, ThroughputMonitor))
        # The per-batch hooks that the monitor has (today only the batch end's).
        self.lists = [
            hooks
            for hooks in map(trainer.hooks.callbacks_for, ("on_train_batch_start", "on_train_batch_end"))
            if self.monitor in hooks
        ]
        self.places = [hooks.index(self.monitor) for hooks in self.lists]
        self.on = True

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.ends.append(time.perf_counter())
        if (batch_idx + 1 + self.block // 2) % self.block == 0:
            for hooks, place in zip(self.lists, self.places):
                if self.on:
                    hooks.remove(self.monitor)
                else:
                    hooks.insert(place, self.monitor)
            self.on = not self.on
        self.present.append(self.on)


def switched_block_ratios(loader: DataLoader, root: str, fits: int, block: int = BLOCK) -> list[float]:
    """Mean step time with the monitor / without it, for each block of steps with it and the block
    without it that follows, in default fits whose monitor a MonitorSwitch turns on and off (the
    first two blocks, with the FLOP-counted step, and the last, maybe short, left out)."""
    ratios = []
    for _ in range(fits):
        switch = MonitorSwitch(block)
        torch.manual_seed(0)
        trainer = tm.Trainer(**one_epoch_options(defaults=True, root=root))
        trainer.callbacks = [switch] + trainer.callbacks
        trainer.fit(MLPModule(), loader)
        steps = zip((b - a for a, b in zip(switch.ends, switch.ends[1:])), switch.present)
        blocks = [
            (on, statistics.fmean(t for t, _ in group)) for on, group in itertools.groupby(steps, key=lambda s: s[1])
        ]
        blocks = blocks[2:-1]
        ratios += [with_it / without for (on, with_it), (_, without) in zip(blocks, blocks[1:]) if on]
    return ratios


def median_interval(values: list[float], resamples: int = 4000, seed: int = 0) -> tuple[float, float]:
    """A bootstrap 95% interval of the median of ``values``."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def report_monitor(runs: dict[bool, list[tuple[float, float, float]]], block_ratios: list[float], raw: float) -> None:
    """The ThroughputMonitor's cost in a default run, as a share of the raw loop's run, against the
    target of 2%: the time inside its hooks plus what its FLOP count adds to the first step (this
    counts the count's start twice: it is inside both). Then two cross-checks that also see what
    no timer inside it can (the dispatcher's call, any slowing of the step's own kernels), at the
    price of the machine's noise: blocks of steps with and without it side by side in the same
    fits, and whole runs with and without it."""
    inside = statistics.median(r[2] for r in runs[True])
    first_step = statistics.median(r[1] for r in runs[True]) - statistics.median(r[1] for r in runs[False])
    fits = len(runs[True])
    print(
        f"the ThroughputMonitor: inside its hooks {inside * 1e3:.2f} ms a fit ({inside / raw:.2%} of the raw loop's "
        f"run), first step +{first_step * 1e3:.2f} ms ({first_step / raw:.2%}; the FLOP count); together "
        f"{(inside + first_step) / raw:.2%}  target < 2%   (medians of {fits} default fits with it, {fits} without)"
    )
    low, high = median_interval(block_ratios)
    print(
        f"cross-check, side by side: a {BLOCK}-step block with it / the block without it that follows, median of "
        f"{len(block_ratios)} pairs {statistics.median(block_ratios):.4f} (95% interval {low:.4f}-{high:.4f})"
    )
    ratios = [a[0] / b[0] for a, b in zip(runs[True], runs[False])]
    low, high = median_interval(ratios)
    print(
        f"cross-check, whole default runs with / without it: median of {len(ratios)} back-to-back pairs "
        f"{statistics.median(ratios):.3f} (95% interval {low:.3f}-{high:.3f})"
    )


def timed(fn, *args, **kwargs) -> tuple[float, torch.nn.Module | None]:
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument(
        "--monitor-pairs",
        type=int,
        default=12,
        help="back-to-back default runs with and without the ThroughputMonitor, and as many "
        "fits that switch it on and off every 16 steps",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 = least noise)")
    parser.add_argument(
        "--compile",
        nargs="?",
        const="inductor",
        default=None,
        metavar="BACKEND",
        help="compare Trainer(compile={'backend': BACKEND}) with eager on a small transformer",
    )
    args = parser.parse_args()
    if args.monitor_pairs < 2:
        parser.error("--monitor-pairs must be at least 2: the monitor's first-step cost is a median over fits")
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    if args.compile:
        compare_compile(args.compile, args.repeats)
        return
    x, y = make_classification_tensors(args.samples, 784, 10, seed=0)
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    times: dict[str, list[float]] = {"raw": [], "lean": [], "defaults": [], "lightning": []}
    with tempfile.TemporaryDirectory() as root:
        raw_loop(loader)  # warm-up: allocator, kernels, first-call imports
        trainer_loop(loader, defaults=False, root=root)
        variants = {
            "raw": lambda: raw_loop(loader),
            "lean": lambda: trainer_loop(loader, defaults=False, root=root),
            "defaults": lambda: trainer_loop(loader, defaults=True, root=root),
            "lightning": lambda: lightning_loop(loader, root=root),
        }
        names, results = list(variants), {}
        for repeat in range(args.repeats):
            # The order rotates each repeat, so that no variant always runs after the same one
            # (a run's aftermath, such as the files the defaults write, slows the next).
            for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                t, results[name] = timed(variants[name])
                if results[name] is not None:
                    times[name].append(t)
        monitor_runs = paired_default_runs(loader, root, args.monitor_pairs)
        block_ratios = switched_block_ratios(loader, root, args.monitor_pairs)
        ref, lean = results["raw"], results["lean"]
        identical = all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), lean.state_dict().values()))
    raw = statistics.median(times["raw"])
    steps = len(loader)
    print(f"{steps} steps per run, {args.repeats} alternating runs each, torch threads={args.threads}")
    print(f"raw PyTorch loop     median {raw:.3f} s  ({raw / steps * 1e6:.0f} us/step)")
    for name in ("lean", "defaults", "lightning"):
        if times[name]:
            median = statistics.median(times[name])
            print(f"{name:20s} median {median:.3f} s  ratio {median / raw:.3f}")
    report_monitor(monitor_runs, block_ratios, raw)
    print(f"trainer-lean weights identical to the raw loop: {identical}")


if __name__ == "__main__":
    main()
