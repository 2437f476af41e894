"""The strategy matrix: what each cell must give, how its legs run, and how a cell is judged.

Used by test_matrix.py (which asserts it) and by ``python matrix_cells.py`` (which runs every
leg and prints the README's strategy table from the outcomes).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch
from legs import run

sys.path.insert(0, str(Path(__file__).parents[1]))
from helpers.batches import WORKERS  # noqa: E402
from helpers.forked import can_fork, run_forked  # noqa: E402

MATRIX = Path(__file__).parent / "matrix_run.py"
ENTRIES = ("trainer", "runtime_before", "runtime_after")
KINDS = ("torch", "keras")
CELLS = [f"{entry}-{kind}" for kind in KINDS for entry in ENTRIES]

# strategy -> (reference leg, tolerance on every weight and buffer; 0 means bit-exact)
EXPECTED = {
    # One process: the hand-written PyTorch loop is the reference (with BatchNorm, one device
    # with the global batch cannot equal ddp's per-rank statistics, by design).
    "single": ("plain", 0.0),
    "ddp": ("ddp", 0.0),
    "ddp_spawn": ("ddp", 0.0),
    "ddp_fork": ("ddp", 0.0),
    "zero1": ("ddp", 0.0),
    "dp": ("ddp", 1e-5),
    "ddp2": ("ddp4", 1e-5),  # 2 nodes x 2 devices against ddp on 4 processes
    "sharded": ("ddp", 1e-4),
    "fsdp": ("ddp", 1e-4),
    "hsdp": ("ddp4", 1e-4),
}
# (strategy, kind) -> what the refusal must say; every other cell must train and match.
REFUSED = {
    (name, "keras"): rf"strategy='{name}' cannot train Sequential, a Keras model.*Use strategy='ddp'"
    for name in ("sharded", "fsdp", "hsdp")
}
REFERENCE_CELLS = {"ddp4": "trainer-torch,trainer-keras"}
# Legs of one world size share one launch: one after another in the same processes and process
# group, whose workers are forks (ddp_fork's start) where this platform has them. Each leg's
# Trainer and Runtime find the group made, as under torchrun, so the cells of ddp_spawn, ddp_fork
# and ddp2 (on two nodes of one process each: its node is the rank) run as in launches of their
# own, without starting their processes again (a launch each was: two spawned workers, two forks,
# two torchrun agents and their workers; a spawned or torchrun worker imports torch and keras
# again). How those start: tests/launchers/ (spawn, fork), test_ddp.py and
# test_manual_optimization_split.py (torchrun nodes, ddp2's among them).
LAUNCHES = [
    ("ddp", "zero1", "sharded", "fsdp", "ddp_spawn", "ddp_fork", "ddp2"),
    ("ddp4", "hsdp"),
    ("plain", "single", "dp"),
]
LEG_TIMEOUT = 300  # seconds per leg; a launch of n legs gets n times this


def launch_of(strategy: str) -> tuple[str, ...]:
    """The legs that run in the same launch as ``strategy``."""
    return next(launch for launch in LAUNCHES if strategy in launch)


def run_matrix(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """``python matrix_run.py ARGS`` in its own session, as a fork of this process where it can
    be (helpers/forked.py: torch is not imported a second time), its workers forks too."""
    if can_fork():
        env = {**os.environ, "OMP_NUM_THREADS": "1", WORKERS: "fork"}
        return run_forked(MATRIX, list(args), env=env, timeout=timeout, cwd=MATRIX.parent)
    return run(str(MATRIX), *args, timeout=timeout)


def run_legs(legs: tuple[str, ...], root: Path) -> dict[str, str]:
    """Every cell of each of ``legs`` (one launch); rank 0 writes one file per cell into
    ``root/<leg>``. Returns, per leg, '' when it ran to its end, else why not."""
    for leg in legs:
        (root / leg).mkdir(parents=True, exist_ok=True)
    batch = root / f"batch-{'-'.join(legs)}.json"
    batch.write_text(
        json.dumps(
            [
                [leg, str(root / leg), REFERENCE_CELLS[leg].split(",") if leg in REFERENCE_CELLS else None]
                for leg in legs
            ]
        )
    )
    try:
        result = run_matrix("--batch", str(batch), timeout=LEG_TIMEOUT * len(legs))
    except subprocess.TimeoutExpired as timeout:
        return {leg: f"{leg}: its launch ({', '.join(legs)}) was killed: {timeout}" for leg in legs}
    problems = {}
    for leg in legs:
        errors = sorted((root / leg).glob("error-*"))
        if errors:
            problems[leg] = f"{leg} failed:\n{errors[0].read_text()[-4000:]}"
        elif result.returncode != 0 or not (root / leg / "complete").exists():
            problems[leg] = (
                f"{leg} did not run to its end: its launch ({', '.join(legs)}) exited {result.returncode} "
                f"(an earlier leg of the launch failed?):\n{result.stderr[-4000:]}"
            )
        else:
            problems[leg] = ""
    return problems


def outcome(path: Path) -> dict[str, torch.Tensor] | str:
    """A cell's trained weights, or the text of the error that refused it."""
    saved = torch.load(path, weights_only=False)
    return saved["error"] if "error" in saved else saved["model"]


def judge(strategy: str, cell: str, results: dict[str, Path]) -> str:
    """'' when the cell is as the matrix requires, else what is wrong with it."""
    reference_leg, tolerance = EXPECTED[strategy]
    kind = cell.split("-")[1]
    got = outcome(results[strategy] / f"{cell}.pt")
    expected_refusal = REFUSED.get((strategy, kind))
    if expected_refusal is not None:
        if isinstance(got, str) and re.search(expected_refusal, got, re.S):
            return ""
        return f"should refuse with /{expected_refusal}/, got {'error: ' + got if isinstance(got, str) else 'weights'}"
    if isinstance(got, str):
        return f"refused unexpectedly: {got}"
    reference = outcome(results[reference_leg] / f"trainer-{kind}.pt")
    assert isinstance(reference, dict), reference
    if set(got) != set(reference):
        return f"different keys: {sorted(set(got) ^ set(reference))}"
    worst = max((got[k].double() - reference[k].double()).abs().max().item() for k in reference)
    exact = all(torch.equal(got[k], reference[k]) for k in reference)
    if (tolerance == 0 and not exact) or worst > tolerance:
        return f"weights differ from {reference_leg} by {worst:.3e} (allowed {tolerance:g})"
    return ""


def table(results: dict[str, Path]) -> str:
    """The README's strategy table: one row per strategy, one column per cell."""
    lines = ["| strategy | " + " | ".join(CELLS) + " |", "|---" * (len(CELLS) + 1) + "|"]
    for strategy, (reference_leg, _tolerance) in EXPECTED.items():
        marks = []
        for cell in CELLS:
            problem = judge(strategy, cell, results)
            refused = (strategy, cell.split("-")[1]) in REFUSED
            marks.append("FAILS" if problem else f"refused[^{cell.split('-')[1]}]" if refused else "= " + reference_leg)
        lines.append(f"| {strategy} | " + " | ".join(marks) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("matrix-results")
    needed = {leg for leg, _ in EXPECTED.values()} | set(EXPECTED)
    outcomes = {}
    for launch in LAUNCHES:
        if needed & set(launch):
            problems = run_legs(launch, root)
            assert not any(problems.values()), problems
            outcomes.update({leg: root / leg for leg in launch})
    print(table(outcomes))
