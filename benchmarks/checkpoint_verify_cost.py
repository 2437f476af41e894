"""What checking a single-file checkpoint's CRC-32s costs (issue 27, item 5; target: under 5% of a save).

A ~50M-parameter fp32 model (three 4096x4096 linear layers) with Adam's state after one step is
saved as the Trainer saves a checkpoint (``trainmesh.checkpoint.atomic_save``: ``torch.save`` to a
temporary file, fsync, rename), about 600 MB. Then, each in a fresh Python process so that no
allocator or import state carries over, in alternating rounds (save, load, check, save, ...):

  save       ``atomic_save`` of the checkpoint dict (the model is built before the clock starts)
  load       ``torch.load(..., weights_only=False)``: the load without any check
  crc_check  ``formats.damaged_record``: every record's CRC-32 (what every load and
             ``trainmesh checkpoint verify`` run before ``torch.load``)

Each child times only its operation (wall: perf_counter; CPU: process_time). The file was just
written, so the load and the check read it from the page cache: the figures are the CPU cost of
the check, not a cold disk's read time (dropping the cache needs root; a cold read would slow the
load and the check alike).

    python benchmarks/checkpoint_verify_cost.py [--rounds 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WIDTH, LAYERS = 4096, 3  # 3 x (4096*4096 + 4096) = 50.3M parameters


def _checkpoint() -> dict[str, object]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, WIDTH)).pow(2).mean().backward()
    optimizer.step()  # Adam's exp_avg and exp_avg_sq now exist: 3 x the weights in all
    return {
        "state_dict": model.state_dict(),
        "optimizer_states": [optimizer.state_dict()],
        "lr_schedulers": [],
        "epoch": 0,
        "global_step": 1,
        "trainmesh_version": "benchmark",
    }


def child(operation: str, path: str) -> None:
    """Run one operation on ``path``; print {"wall": s, "cpu": s} as JSON."""
    import torch

    from trainmesh.checkpoint import atomic_save
    from trainmesh.checkpoint.formats import damaged_record

    checkpoint = _checkpoint() if operation == "save" else None
    wall, cpu = time.perf_counter(), time.process_time()
    if operation == "save":
        atomic_save(checkpoint, path)
    elif operation == "load":
        torch.load(path, map_location="cpu", weights_only=False)
    else:
        bad = damaged_record(Path(path))
        assert bad is None, bad
    print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}))


def run_child(operation: str, path: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", operation, path], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--child", nargs=2, metavar=("OPERATION", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = os.path.join(folder, "model.ckpt")
        times: dict[str, list[dict[str, float]]] = {"save": [], "load": [], "crc_check": []}
        for _ in range(args.rounds):
            for operation in times:
                times[operation].append(run_child(operation, path))
        size = os.path.getsize(path)
    print(f"checkpoint: {WIDTH}x{WIDTH} x {LAYERS} linear layers + Adam state, fp32, {size / 1e6:.0f} MB")
    print(f"{args.rounds} alternating rounds, each operation in a fresh process; medians (all runs):")
    median = {}
    for operation, runs in times.items():
        median[operation] = {kind: statistics.median(r[kind] for r in runs) for kind in ("wall", "cpu")}
        walls = ", ".join(f"{r['wall']:.3f}" for r in runs)
        print(
            f"  {operation:9s} wall {median[operation]['wall']:.3f} s  cpu {median[operation]['cpu']:.3f} s"
            f"  ({walls}); {size / 1e6 / median[operation]['wall']:.0f} MB/s"
        )
    for reference in ("save", "load"):
        ratios = " ".join(
            f"{kind} {median['crc_check'][kind] / median[reference][kind]:.1%}" for kind in ("wall", "cpu")
        )
        print(f"crc_check / {reference}: {ratios}")


if __name__ == "__main__":
    main()
