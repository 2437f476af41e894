"""Where the CPU of ``import trainmesh; trainmesh.Trainer`` after ``import torch`` goes, in fresh
processes without bytecode caches (``PYTHONDONTWRITEBYTECODE=1``), medians of ``--repeats``: all of
it; the full (generation 2) garbage collections during it (read with ``gc.callbacks``: ``import
torch`` leaves one pending, which the next ~12,000 objects any program allocates trigger); the
import with the collector off; and with the collector off and warm bytecode caches (a private
``PYTHONPYCACHEPREFIX``), which leaves running the modules' bodies. Compiling is the difference of
the last two. CPU time, which a machine that others load inflates less than the wall clock.

    python benchmarks/import_breakdown.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

_MEASURE = """
import gc, sys, time
import torch
full = []
started = [0.0]
def watch(phase, info):
    if phase == "start":
        started[0] = time.process_time()
    elif info["generation"] == 2:
        full.append(time.process_time() - started[0])
gc.callbacks.append(watch)
if sys.argv[1] == "off":
    gc.disable()
began = time.process_time()
import trainmesh
trainmesh.Trainer
print(time.process_time() - began, sum(full))
"""


def measure(collector: str, env: dict[str, str]) -> tuple[float, float]:
    """(CPU of the import, CPU of the full collections in it) in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, collector], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    base = {**os.environ, "OMP_NUM_THREADS": "1"}
    cold = {**base, "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryDirectory() as prefix:
        warm = {k: v for k, v in base.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPYCACHEPREFIX": prefix}
        measure("off", warm)  # writes the bytecode caches; not counted
        rows = [(measure("on", cold), measure("off", cold), measure("off", warm)) for _ in range(args.repeats)]
    total = statistics.median(on[0] for on, _, _ in rows)
    collections = statistics.median(on[1] for on, _, _ in rows)
    off = statistics.median(cold_off[0] for _, cold_off, _ in rows)
    bodies = statistics.median(warm_off[0] for _, _, warm_off in rows)
    print(
        f"tm.Trainer's import, CPU (medians of {args.repeats}): {total:.3f} s; full garbage collections in it "
        f"{collections:.3f} s; with the collector off {off:.3f} s, of which compiling {off - bodies:.3f} s and "
        f"running the modules' bodies {bodies:.3f} s (warm bytecode caches)"
    )


if __name__ == "__main__":
    main()
