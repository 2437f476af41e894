"""What ``import trainmesh`` adds to ``import torch``, in fresh interpreters.

Each run is a new ``python -c`` process, timed from start to exit: ``import torch`` alone, then
``import torch, trainmesh``, alternated ``--repeats`` times so that machine noise (a busy core,
a cold file cache) hits both alike. The medians' difference is trainmesh's own cost; the target
is at most 0.10 s of wall-clock time (issue 38; 0.20 s before it). The processes' CPU time (user +
system) is printed too: on a machine that others load, it varies less than the wall clock does.

Part of what any import after torch's costs is torch's: ``import torch`` leaves a full (generation
2) garbage collection pending over its ~170,000 objects, which the next ~12,000 objects a program
allocates trigger, whatever they are (tm.Trainer's import is such a program). The last variant
allocates 20,000 empty dicts and nothing else, so that its difference shows that collection's cost
alone; a program that builds a model pays it too, with or without trainmesh.

The target holds only while every heavy or optional dependency (DTensor and sympy behind
ZeroRedundancyOptimizer, FSDP, checkpointing, loggers, the CLI) is imported where it is used, and
each strategy, callback and launcher when a run uses it (tests/test_import.py names what
``trainmesh.Trainer`` must not import).
``python -X importtime -c "import torch, trainmesh"`` shows which import is to blame.

    python benchmarks/import_time.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

TARGET_S = 0.10
# `import trainmesh` imports its names on first use (trainmesh/__init__): the last variant is
# what a program that trains pays, the Trainer and everything under it.
VARIANTS = {
    "torch": "import torch",
    "torch + trainmesh": "import torch, trainmesh",
    "torch + tm.Trainer": "import torch, trainmesh; trainmesh.Trainer",
    "torch + 20k objects": "import torch; objects = [{} for _ in range(20000)]",  # torch's pending collection
}


def time_once(code: str) -> tuple[float, float]:
    """Wall-clock and CPU seconds of a fresh interpreter that runs ``code``, start to exit."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    time_once(VARIANTS["torch + trainmesh"])  # warm the file cache; not counted
    walls: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpus: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.repeats):
        for name, code in VARIANTS.items():
            wall, cpu = time_once(code)
            walls[name].append(wall)
            cpus[name].append(cpu)
    for name in VARIANTS:
        print(
            f"{name:19s} wall median {statistics.median(walls[name]):.3f} s (min {min(walls[name]):.3f}, "
            f"max {max(walls[name]):.3f}); CPU median {statistics.median(cpus[name]):.3f} s; {args.repeats} runs"
        )
    for name in ("torch + trainmesh", "torch + tm.Trainer"):
        delta = statistics.median(walls[name]) - statistics.median(walls["torch"])
        cpu_delta = statistics.median(cpus[name]) - statistics.median(cpus["torch"])
        verdict = "meets" if delta <= TARGET_S else "MISSES"
        print(
            f"{name} adds {delta:.3f} s (wall; CPU {cpu_delta:.3f} s) to import torch: {verdict} the "
            f"target of <= {TARGET_S:.2f} s"
        )
    delta = statistics.median(walls["torch + 20k objects"]) - statistics.median(walls["torch"])
    cpu_delta = statistics.median(cpus["torch + 20k objects"]) - statistics.median(cpus["torch"])
    print(
        f"torch + 20k objects adds {delta:.3f} s (wall; CPU {cpu_delta:.3f} s): the full garbage collection "
        "import torch leaves pending, paid by whatever allocates next (part of tm.Trainer's figure above)"
    )


if __name__ == "__main__":
    main()
