"""Trainer vs a raw PyTorch loop: the time the Trainer adds to a training epoch.

The seed's 784-128-10 MLP, batch 16, Adam, on generated data, one epoch per run. Runs
alternate (raw, trainer-lean, trainer-defaults[, lightning]) in one process so that machine
noise hits every variant alike; the medians' ratios are printed.

    python benchmarks/loop_overhead.py [--samples 16384] [--repeats 9]
    python benchmarks/loop_overhead.py --compile [inductor|aot_eager] [--repeats 3]

``--compile`` measures instead the step time of ``Trainer(compile=...)`` against eager on a
small transformer (2 encoder layers, d=64, sequence 32, batch 16): the median step after the
first 10 (compilation and warm-up excluded), in alternating runs.

"lean" is the Trainer with extras off (no progress bar, logger, checkpointing, summary);
"defaults" is ``Trainer()`` as a user gets it (progress bar, CSV logger, a checkpoint at
the epoch's end, model summary).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from seed_mlp import MLPModule, build_mlp, lightning_mlp, one_epoch_options
from trainmesh.data.synthetic import make_classification_tensors





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


def trainer_loop(loader: DataLoader, *, defaults: bool, root: str, monitor: bool = True) -> torch.nn.Module:
    torch.manual_seed(0)
    module = MLPModule()
    trainer = tm.Trainer(**one_epoch_options(defaults=defaults, root=root))
    if defaults and not monitor:
        # The defaults less the ThroughputMonitor the progress bar brings: what the monitor costs.
        trainer.callbacks = [cb for cb in trainer.callbacks if type(cb).__name__ != "ThroughputMonitor"]
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
    trainer = tm.Trainer(max_epochs=1, accelerator="cpu", devices=1, enable_progress_bar=False, logger=False,
                         enable_checkpointing=False, enable_model_summary=False, callbacks=[timer], compile=compile)
    trainer.fit(SmallTransformer(), loader)
    return statistics.median(b - a for a, b in zip(timer.ends[skip:], timer.ends[skip + 1:]))


def compare_compile(backend: str, repeats: int) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16 * 60, 32, 64, generator=g)
    loader = DataLoader(TensorDataset(x, torch.randint(0, 10, (len(x),), generator=g)), batch_size=16)
    eager, compiled = [], []
    for _ in range(repeats):  # alternating, so machine noise hits both alike
        eager.append(step_time(loader, False))
        compiled.append(step_time(loader, {"backend": backend}))
    e, c = statistics.median(eager), statistics.median(compiled)
    print(f"small transformer, {len(loader)} steps per run, {repeats} alternating runs each, torch threads="
          f"{torch.get_num_threads()}")
    print(f"eager                median {e * 1e3:.2f} ms/step")
    print(f"compile={backend:12s} median {c * 1e3:.2f} ms/step  ratio compiled/eager {c / e:.3f}")


def monitor_hook_cost(batch: tuple[torch.Tensor, torch.Tensor], calls: int = 100_000) -> float:
    """Seconds per training step that the ThroughputMonitor's two batch hooks take, called through
    the Trainer's hook dispatcher in a tight loop (FLOP counting off: it runs once per fit, on the
    first step, and is timed with the whole runs above). Repeatable where whole-run ratios are noisy."""
    from types import SimpleNamespace

    from trainmesh.callbacks.throughput import ThroughputMonitor
    from trainmesh.trainer.hooks import HookDispatcher

    monitor = ThroughputMonitor(count_flops=False)
    trainer = SimpleNamespace(global_step=0, log_every_n_steps=50, runtime=SimpleNamespace(device=torch.device("cpu")),
                              is_global_zero=True, sanity_checking=False, loggers=[], model=None)
    hooks = HookDispatcher(trainer, torch.nn.Module(), [monitor])
    monitor.on_train_start(trainer, None)
    start = time.perf_counter()
    for step in range(calls):
        hooks.call("on_train_batch_start", batch, step)
        trainer.global_step = step
        hooks.call("on_train_batch_end", None, batch, step)
    return (time.perf_counter() - start) / calls


def timed(fn, *args, **kwargs) -> tuple[float, torch.nn.Module | None]:
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 = least noise)")
    parser.add_argument("--compile", nargs="?", const="inductor", default=None, metavar="BACKEND",
                        help="compare Trainer(compile={'backend': BACKEND}) with eager on a small transformer")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    if args.compile:
        compare_compile(args.compile, args.repeats)
        return
    x, y = make_classification_tensors(args.samples, 784, 10, seed=0)
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    times: dict[str, list[float]] = {"raw": [], "lean": [], "defaults": [], "no_monitor": [], "lightning": []}
    with tempfile.TemporaryDirectory() as root:
        raw_loop(loader)  # warm-up: allocator, kernels, first-call imports
        trainer_loop(loader, defaults=False, root=root)
        variants = {
            "raw": lambda: raw_loop(loader),
            "lean": lambda: trainer_loop(loader, defaults=False, root=root),
            "defaults": lambda: trainer_loop(loader, defaults=True, root=root),
            "no_monitor": lambda: trainer_loop(loader, defaults=True, root=root, monitor=False),
            "lightning": lambda: lightning_loop(loader, root=root),
        }
        names, results = list(variants), {}
        for repeat in range(args.repeats):
            # The order rotates each repeat, so that no variant always runs after the same one
            # (a run's aftermath, such as the files the defaults write, slows the next).
            for name in names[repeat % len(names):] + names[:repeat % len(names)]:
                t, results[name] = timed(variants[name])
                if results[name] is not None:
                    times[name].append(t)
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
    monitor = statistics.median(times["defaults"]) / statistics.median(times["no_monitor"])
    paired = statistics.median(d / n for d, n in zip(times["defaults"], times["no_monitor"]))
    print(f"defaults without the ThroughputMonitor: ratio {statistics.median(times['no_monitor']) / raw:.3f}; "
          f"the monitor's cost: defaults / without it {monitor:.3f} (paired {paired:.3f})  target < 1.02")
    hook_cost = monitor_hook_cost(next(iter(loader)))
    print(f"the monitor's batch hooks alone: {hook_cost * 1e6:.2f} us/step = {hook_cost / (raw / steps):.2%} of the raw "
          "loop's step (FLOPs counted once per fit, on its first step, besides)")
    print(f"trainer-lean weights identical to the raw loop: {identical}")


if __name__ == "__main__":
    main()
