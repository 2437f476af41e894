"""How long a checkpoint save stalls training, synchronous vs ``AsyncCheckpointIO`` (issue 27,
item 6; target: an async save's stall under 20% of a synchronous save's).

A ~50M-parameter fp32 model (three 4096x4096 linear layers) trained with Adam by a real
``Trainer.fit`` (one CPU process, batch 4, ``max_steps=STEPS``), with
``ModelCheckpoint(every_n_train_steps=EVERY, save_top_k=-1)``: a ~600 MB checkpoint (weights and
Adam's two moments) every EVERY steps. Each run is a fresh Python process, sync and async
alternating (sync, async, sync, ...), so that no allocator or page-cache state favours one.

The stall is the time the training thread spends inside ``Trainer._save_checkpoint``: for a
synchronous save, building the checkpoint dict and writing it (``torch.save`` to a temporary
file, fsync, rename); for an async one, building it and copying its tensors to host memory (the
background thread then writes while the next steps run). Wall (perf_counter) and the training
thread's CPU (thread_time) per save. The first async save is reported apart from the later ones:
it used to allocate the staging memory (page faults) while training waited; AsyncCheckpointIO now
allocates it in the background before (the model's when fit starts, Adam's after its first step). The fit's total
wall and process CPU time (all threads) and the end-of-fit wait (for the last save in flight)
are printed too: on a machine whose cores are busy, the background write competes with the
training steps for CPU (and for the GIL while it pickles).

    python benchmarks/async_checkpoint_stall.py [--rounds 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WIDTH, LAYERS = 4096, 3  # 3 x (4096*4096 + 4096) = 50.3M parameters
STEPS, EVERY = 18, 6  # 3 saves; the last one, at the end of fit, is waited for there


def _child(variant: str, folder: Path) -> dict[str, object]:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    import trainmesh as tm
    from trainmesh.callbacks import ModelCheckpoint
    from trainmesh.checkpoint import AsyncCheckpointIO

    torch.manual_seed(0)

    class Big(tm.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-4)

    stalls: list[tuple[float, float]] = []
    real = tm.Trainer._save_checkpoint

    def timed(self: tm.Trainer, *args: object, **kwargs: object) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        stalls.append((time.perf_counter() - wall, time.thread_time() - cpu))

    tm.Trainer._save_checkpoint = timed  # type: ignore[method-assign]
    ended: list[float] = []

    class EndTime(tm.Callback):
        def on_train_end(self, trainer: object, module: object) -> None:
            ended.append(time.perf_counter())

    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=STEPS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=folder,
        plugins=[AsyncCheckpointIO()] if variant == "async" else None,
        callbacks=[ModelCheckpoint(dirpath=folder, every_n_train_steps=EVERY, save_top_k=-1), EndTime()],
    )
    data = DataLoader(TensorDataset(torch.randn(4 * STEPS, WIDTH)), batch_size=4)
    start, start_cpu = time.perf_counter(), time.process_time()
    trainer.fit(Big(), data)
    done, fit_cpu = time.perf_counter(), time.process_time() - start_cpu
    size = sum(path.stat().st_size for path in folder.iterdir() if path.suffix == ".ckpt")
    return {
        "variant": variant,
        "stalls": stalls,
        "fit_s": done - start,
        "fit_cpu_s": fit_cpu,
        "end_wait_s": done - ended[0],
        "mb_per_save": size / len(stalls) / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--child", choices=["sync", "async"])
    parser.add_argument("--folder")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, Path(args.folder))))
        return
    results: dict[str, list[dict]] = {"sync": [], "async": []}
    for round_index in range(args.rounds):
        for variant in ("sync", "async"):
            folder = Path(tempfile.mkdtemp(prefix="async-stall-", dir=args.dir))
            try:
                env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
                done = subprocess.run(
                    [sys.executable, __file__, "--child", variant, "--folder", str(folder)],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=env,
                )
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            results[variant].append(result)
            walls = ", ".join(f"{wall:.3f}" for wall, _ in result["stalls"])
            print(
                f"round {round_index} {variant:5s}: stall per save (wall s) {walls}; "
                f"fit {result['fit_s']:.1f} s, end-of-fit wait {result['end_wait_s']:.2f} s",
                flush=True,
            )
    _summarise(results)


def _summarise(results: dict[str, list[dict]]) -> None:
    def pooled(variant: str, which: int, first: bool) -> list[float]:
        # Async: the first save of a run allocates the staging memory; the others refill it.
        return [s[which] for r in results[variant] for i, s in enumerate(r["stalls"]) if (i == 0) == first]

    sync_wall = pooled("sync", 0, False) + pooled("sync", 0, True)
    sync_cpu = pooled("sync", 1, False) + pooled("sync", 1, True)
    reference = statistics.median(sync_wall)
    print(f"\ncheckpoint size: {results['sync'][0]['mb_per_save']:.0f} MB; {len(sync_wall)} sync saves")
    print(
        f"sync saves:           wall median {reference:.3f} s (min {min(sync_wall):.3f}, max {max(sync_wall):.3f}); "
        f"CPU median {statistics.median(sync_cpu):.3f} s"
    )
    for label, first in (("async, first save", True), ("async, later saves", False)):
        wall, cpu = pooled("async", 0, first), pooled("async", 1, first)
        print(
            f"{label:21s} wall median {statistics.median(wall):.3f} s (min {min(wall):.3f}, max {max(wall):.3f}); "
            f"CPU median {statistics.median(cpu):.3f} s; "
            f"{100 * statistics.median(wall) / reference:.1f}% of a sync save's wall (target < 20%)"
        )
    for variant in ("sync", "async"):
        fits = [r["fit_s"] for r in results[variant]]
        cpus = [r["fit_cpu_s"] for r in results[variant]]
        waits = [r["end_wait_s"] for r in results[variant]]
        print(
            f"{variant:5s} fit total: median {statistics.median(fits):.1f} s (min {min(fits):.1f}, max {max(fits):.1f}); "
            f"process CPU median {statistics.median(cpus):.1f} s; end-of-fit wait median {statistics.median(waits):.2f} s"
        )


if __name__ == "__main__":
    main()
