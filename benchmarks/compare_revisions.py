"""Run one benchmark on two revisions of trainmesh, alternating, each run in a fresh process.

    python benchmarks/compare_revisions.py OLD_REV [NEW_REV] --rounds 3 -- benchmarks/loop_overhead.py --repeats 5

Each revision is checked out (``git worktree``) into a temporary folder; the benchmark script is
the one given (from this checkout, so both revisions are measured by the same code) and runs
with ``PYTHONPATH`` set to the revision's ``src``. Rounds alternate the order (old, new; new,
old; ...), so that a machine slowing down hits both alike. Every ``NAME ... ratio X`` line the
benchmark prints (its ratio against the reference it measures in the same run) is collected;
the medians per revision, and the median of new / old per round, are printed.
NEW_REV defaults to the working tree (uncommitted changes included).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RATIO = re.compile(r"^(?P<name>[\w-]+(?: [\w-]+)*)\s.*\bratio (?P<value>\d+\.\d+)")


def source_of(revision: str | None, folder: Path) -> Path:
    if revision is None:
        return ROOT / "src"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(folder), revision], check=True)
    return folder / "src"


def ratios(source: Path, command: list[str]) -> dict[str, float]:
    environment = {**os.environ, "PYTHONPATH": str(source)}
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, env=environment, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"benchmark failed with {source}:\n{done.stderr[-2000:]}")
    found = {}
    for line in done.stdout.splitlines():
        match = RATIO.match(line.strip())
        if match:
            found[match["name"].strip()] = float(match["value"])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old")
    parser.add_argument("new", nargs="?", default=None, help="default: this working tree")
    parser.add_argument("--rounds", type=int, default=3)
    argv = sys.argv[1:]
    if "--" not in argv:
        parser.error("give the benchmark after --: ... -- benchmarks/loop_overhead.py [ARGS...]")
    split = argv.index("--")
    args, command = parser.parse_args(argv[:split]), argv[split + 1 :]
    with tempfile.TemporaryDirectory() as scratch:
        sources = {"old": source_of(args.old, Path(scratch) / "old"), "new": source_of(args.new, Path(scratch) / "new")}
        try:
            runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
            for round_ in range(args.rounds):
                for label in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
                    runs[label].append(ratios(sources[label], command))
                    print(f"round {round_ + 1} {label}: {runs[label][-1]}", flush=True)
        finally:
            for label, revision in (("old", args.old), ("new", args.new)):
                if revision is not None:
                    subprocess.run(
                        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(Path(scratch) / label)],
                        check=False,
                    )
    names = sorted(set(runs["old"][0]) & set(runs["new"][0]))
    print(f"\n{args.rounds} rounds, alternating; medians of the benchmark's own ratios")
    for name in names:
        old = statistics.median(run[name] for run in runs["old"])
        new = statistics.median(run[name] for run in runs["new"])
        paired = statistics.median(n[name] / o[name] for n, o in zip(runs["new"], runs["old"]))
        print(f"{name:12s} old {old:.3f}  new {new:.3f}  new/old paired {paired:.3f}")


if __name__ == "__main__":
    main()
