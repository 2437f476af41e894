"""What the digest written with a checkpoint costs on save and on load (issue 27, item 5; target:
under 5% of a save of a 50M-parameter model plus Adam).

A ~50M-parameter fp32 model (three 4096x4096 linear layers) with Adam's state after one step is
saved as the Trainer saves a checkpoint (``trainmesh.checkpoint.atomic_save``: ``torch.save`` to a
temporary file, the digest, fsync, rename), about 600 MB. Then, each in a fresh Python process so
that no allocator or import state carries over, in alternating rounds:

  save_plain    ``atomic_save`` with the digest and its marker record left out (``io.save_marked``
                replaced by ``torch.save``, ``io.write_trailer`` by a no-op): as older trainmesh saved
  save_digest   ``atomic_save`` as trainmesh runs it: the digest written last (checkpoint/digest.py)
  load_plain    ``torch.load(..., weights_only=False)`` of the file: no check at all
  load_digest   ``load_checkpoint_file`` of the file with its digest: structure and pickle checked,
                then each record hashed as torch.load reads it (one read)
  load_zipcrc   ``load_checkpoint_file`` of a file without a digest (older trainmesh, Lightning):
                every record's zip CRC-32 in a read of its own, then torch.load (what every load did before)

Each child times only its operation (wall: perf_counter; CPU: process_time, every thread's; and
the calling thread's CPU alone, thread_time: what lies on the operation's path when another core
is free, since the load's digest check hashes on other threads, checkpoint/crc.py); the model is
built before the clock starts; the machine's load is printed with the figures. The files were
just written, so the loads read them from the page cache:
the figures are the CPU cost of the checks, not a cold disk's read time.

    python benchmarks/checkpoint_verify_cost.py [--rounds 5] [--dir /tmp] [--without-zipcrc]
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

from isolated import load

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


OPERATIONS = ("save_plain", "save_digest", "load_plain", "load_digest", "load_zipcrc")


def child(operation: str, folder: str) -> None:
    """Run one operation on the files in ``folder``; print {"wall": s, "cpu": s} as JSON."""
    import torch

    from trainmesh.checkpoint import io
    from trainmesh.checkpoint.digest import read_trailer

    digest_file, plain_file = os.path.join(folder, "digest.ckpt"), os.path.join(folder, "plain.ckpt")
    checkpoint = _checkpoint() if operation.startswith("save") else None
    trailer: dict[str, float] = {"trailer_wall": 0.0, "trailer_cpu": 0.0}
    if operation == "save_plain":
        io.save_marked = lambda obj, handle: torch.save(obj, handle)  # type: ignore[assignment,misc,return-value]
        # Not None: None would make atomic_save save again without the marker (a second save timed).
        io.write_trailer = lambda fd: "no digest"  # type: ignore[assignment,misc,return-value]
    elif operation == "save_digest":
        write_trailer = io.write_trailer

        def timed(fd: int) -> object:  # the digest step alone, inside the save
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            try:
                return write_trailer(fd)
            finally:
                trailer["trailer_wall"] += time.perf_counter() - start_wall
                trailer["trailer_cpu"] += time.process_time() - start_cpu

        io.write_trailer = timed  # type: ignore[assignment]
    wall, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
    if operation.startswith("save"):
        io.atomic_save(checkpoint, digest_file if operation == "save_digest" else plain_file)
    elif operation == "load_plain":
        torch.load(digest_file, map_location="cpu", weights_only=False)
    else:
        io.load_checkpoint_file(digest_file if operation == "load_digest" else plain_file)
    result = {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "thread_cpu": time.thread_time() - thread,  # the calling thread's alone: not a hashing thread's
        **trailer,
    }
    if operation.startswith("save"):
        with open(digest_file if operation == "save_digest" else plain_file, "rb") as handle:
            assert (read_trailer(handle.fileno()) is not None) == (operation == "save_digest")
    print(json.dumps(result))


def run_child(operation: str, folder: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", operation, folder], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument(
        "--without-zipcrc", action="store_true", help="leave load_zipcrc out (the others are needed for the shares)"
    )
    parser.add_argument("--child", nargs=2, metavar=("OPERATION", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        operations = [o for o in OPERATIONS if not (args.without_zipcrc and o == "load_zipcrc")]
        times: dict[str, list[dict[str, float]]] = {operation: [] for operation in operations}
        for _ in range(args.rounds):
            for operation in operations:
                times[operation].append(run_child(operation, folder))
        size = os.path.getsize(os.path.join(folder, "digest.ckpt"))
    print(f"checkpoint: {WIDTH}x{WIDTH} x {LAYERS} linear layers + Adam state, fp32, {size / 1e6:.0f} MB")
    print(f"{args.rounds} alternating rounds, each operation in a fresh process; median [min-max] seconds; {load()}")
    median = {}
    for operation, runs in times.items():
        median[operation] = {kind: statistics.median(r[kind] for r in runs) for kind in ("wall", "cpu")}
        spread = {
            kind: f"[{min(r[kind] for r in runs):.3f}-{max(r[kind] for r in runs):.3f}]" for kind in ("wall", "cpu")
        }
        thread = statistics.median(r["thread_cpu"] for r in runs)
        print(
            f"  {operation:11s} wall {median[operation]['wall']:.3f} {spread['wall']}"
            f"  cpu {median[operation]['cpu']:.3f} {spread['cpu']}  calling thread's cpu {thread:.3f}"
        )
        median[operation]["thread_cpu"] = thread
    save = median["save_plain"]
    runs = times["save_digest"]
    alone = {kind: statistics.median(r[f"trailer_{kind}"] for r in runs) for kind in ("wall", "cpu")}
    print(
        f"the digest step alone (io.write_trailer inside save_digest): wall {alone['wall']:.4f} s "
        f"({alone['wall'] / save['wall']:.2%} of a save), cpu {alone['cpu']:.4f} s ({alone['cpu'] / save['cpu']:.2%})"
    )
    for label, extra, base in (
        ("digest on save", "save_digest", "save_plain"),
        ("digest check on load", "load_digest", "load_plain"),
        ("zip-CRC check on load (no digest)", "load_zipcrc", "load_plain"),
    ):
        if extra not in median:
            continue
        ratios = " ".join(
            f"{kind} {(median[extra][kind] - median[base][kind]) / save[kind]:+.1%}" for kind in ("wall", "cpu")
        )
        print(f"{label}, as a share of a save: {ratios}")
    on_thread = median["load_digest"]["thread_cpu"] - median["load_plain"]["thread_cpu"]
    print(
        f"digest check on load, the loading thread's cpu alone (its path when a core is free): {on_thread:+.3f} s, "
        f"{on_thread / save['cpu']:+.1%} of a save's cpu"
    )


if __name__ == "__main__":
    main()
