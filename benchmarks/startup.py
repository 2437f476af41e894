"""Start-up of ``python train.py`` under ddp against a hand-written DDP script under torchrun.

The same work in three commands, each a fresh process tree timed from its start to its exit:

  (a) torchrun:          ``python -m torch.distributed.run --standalone --nproc-per-node 2
                         startup_scripts/handwritten_ddp.py`` (DDP, DistributedSampler, Adam)
  (b) python train.py:   ``python startup_scripts/trainmesh_ddp.py``: Trainer(strategy="ddp",
                         devices=2) starts its own workers through torch's elastic agent
  (c) trainmesh+torchrun: the script of (b) under the torchrun command of (a)

The work: the seed's 784-128-10 MLP, batch 16 per process, ``--steps`` steps on generated
data, 2 processes, gloo. The commands alternate (a, b, c, a, b, c, ...) so that machine noise
hits them alike, and the medians are printed with the ratios (b)/(a) and (c)/(a).

Every process of the scripts appends ``<rank> <phase> <time.time()>`` to a file named by
STARTUP_MARKS (rank "agent" for the process that runs the script before launching its
workers), so the wall clock places each phase against the command's start: when the first and
last worker start (their first line of user code), and when the first training step begins.
Inside a worker: import (torch and trainmesh), building model and data, Trainer construction,
and fit's set-up until the first step (the process group's rendezvous included).

The commands run with Python's bytecode cache on, as an installed package has it: a
PYTHONDONTWRITEBYTECODE in the environment is dropped for them, so the warm-up run writes
trainmesh's ``__pycache__`` (git ignores it) and no run recompiles its sources (0.1-0.2 s per
process). ``--no-bytecode-cache`` keeps the environment as it is.

    python benchmarks/startup.py [--repeats 7] [--steps 30] [--only a b] [--no-bytecode-cache]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "startup_scripts")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
VARIANTS = {
    "a torchrun, hand-written": [*TORCHRUN, os.path.join(SCRIPTS, "handwritten_ddp.py")],
    "b python train.py": [sys.executable, os.path.join(SCRIPTS, "trainmesh_ddp.py")],
    "c torchrun, trainmesh": [*TORCHRUN, os.path.join(SCRIPTS, "trainmesh_ddp.py")],
}
WORKER_PHASES = ("start", "imported", "built", "trainer", "first_step")


def run_once(command: list[str], *, steps: int, folder: str, bytecode_cache: bool) -> dict[str, float]:
    """One command's timings, in seconds from its start: "whole", "first_worker", "last_worker",
    "first_step", and per-worker phase lengths (medians over the ranks)."""
    marks_path = os.path.join(folder, "marks.txt")
    if os.path.exists(marks_path):
        os.remove(marks_path)
    env = dict(os.environ, STARTUP_MARKS=marks_path, STARTUP_STEPS=str(steps))
    env.pop("MASTER_PORT", None)  # each run picks a free port
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.time()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    whole = time.time() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    marks: dict[str, dict[str, float]] = collections.defaultdict(dict)
    with open(marks_path) as file:
        for line in file:
            rank, phase, stamp = line.split()
            marks[rank][phase] = float(stamp) - start
    workers = [phases for rank, phases in marks.items() if rank != "agent"]
    if len(workers) != 2 or any("first_step" not in phases for phases in workers):
        raise RuntimeError(f"{' '.join(command)}: expected 2 workers that each reached a step, got {dict(marks)}")
    timings = {
        "whole": whole,
        "first_worker": min(w["start"] for w in workers),
        "last_worker": max(w["start"] for w in workers),
        "first_step": max(w["first_step"] for w in workers),
        "after_workers": whole - max(w["end"] for w in workers),
    }
    # Phase lengths inside a worker; the hand-written script has no Trainer: its set-up phase
    # (process group, DDP) is counted from "built".
    for worker_index, phases in enumerate(workers):
        previous = "start"
        for phase in WORKER_PHASES[1:]:
            if phase in phases:
                timings[f"w{worker_index}:{previous}->{phase}"] = phases[phase] - phases[previous]
                previous = phase
    if "agent" in marks:
        agent = marks["agent"]
        timings["agent_until_launch"] = max(agent.values())
        timings["agent_launch_to_first_worker"] = timings["first_worker"] - max(agent.values())
    return timings


def median_of(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def worker_phase_medians(runs: list[dict[str, float]]) -> dict[str, float]:
    by_phase: dict[str, list[float]] = collections.defaultdict(list)
    for run in runs:
        for key, value in run.items():
            if key.startswith("w") and ":" in key:
                by_phase[key.split(":", 1)[1]].append(value)
    return {phase: statistics.median(values) for phase, values in by_phase.items()}


def report(results: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    names = list(results)
    reference = results[names[0]]
    cache = "off (PYTHONDONTWRITEBYTECODE kept)" if args.no_bytecode_cache else "on"
    print(
        f"{args.steps} steps of the seed MLP (batch 16 per process, 2 processes, gloo), {args.repeats} alternating "
        f"runs of each command; medians, seconds from the command's start; bytecode cache {cache}"
    )
    print(
        f"{'command':28s} {'whole':>7s} {'ratio':>6s} {'paired':>6s} {'1st wkr':>8s} {'vs (a)':>7s} "
        f"{'last wkr':>8s} {'1st step':>8s} {'vs (a)':>7s} {'exit':>6s}"
    )
    for name, runs in results.items():
        whole = median_of(runs, "whole")
        paired = statistics.median(run["whole"] / ref["whole"] for run, ref in zip(runs, reference))
        print(
            f"{name:28s} {whole:7.2f} {whole / median_of(reference, 'whole'):6.3f} {paired:6.3f} "
            f"{median_of(runs, 'first_worker'):8.2f} "
            f"{median_of(runs, 'first_worker') - median_of(reference, 'first_worker'):+7.2f} "
            f"{median_of(runs, 'last_worker'):8.2f} {median_of(runs, 'first_step'):8.2f} "
            f"{median_of(runs, 'first_step') - median_of(reference, 'first_step'):+7.2f} "
            f"{median_of(runs, 'after_workers'):6.2f}"
        )
    print(
        "targets: (b)/(a) whole <= 1.05; (b)'s first worker within +0.30 s of (a)'s. "
        "'exit': from the last worker's end to the command's exit"
    )
    print("inside a worker (medians over runs and ranks, seconds):")
    for name, runs in results.items():
        phases = worker_phase_medians(runs)
        print(f"  {name:26s} " + "  ".join(f"{phase} {value:.2f}" for phase, value in phases.items()))
    for name, runs in results.items():
        if "agent_until_launch" in runs[0]:
            print(
                f"  {name:26s} agent: script start to its last line before launching "
                f"{median_of(runs, 'agent_until_launch'):.2f}, then to the first worker's start "
                f"{median_of(runs, 'agent_launch_to_first_worker'):.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30, help="training steps per run")
    parser.add_argument("--only", nargs="*", default=None, help="variant letters to run (default: a b c)")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE if set (every process compiles trainmesh's sources)",
    )
    args = parser.parse_args()
    variants = {name: command for name, command in VARIANTS.items() if args.only is None or name[0] in args.only}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as folder:
        for command in variants.values():  # warm-up: the file cache, .pyc files
            run_once(command, steps=args.steps, folder=folder, bytecode_cache=not args.no_bytecode_cache)
        for _ in range(args.repeats):
            for name, command in variants.items():
                results[name].append(
                    run_once(command, steps=args.steps, folder=folder, bytecode_cache=not args.no_bytecode_cache)
                )
    report(results, args)


if __name__ == "__main__":
    main()
