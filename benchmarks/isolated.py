"""Run each benchmark variant in its own fresh processes, alternating, and summarise with spread.

A variant timed in a process where another variant ran before inherits what that one changed
for the whole process: glibc's malloc settings (``mallopt``), torch's thread count, environment
variables, the heap's layout, warmed caches. So each run of each variant here is a new set of
processes (one per rank, started with torchrun's environment), the variants take turns
(A B A B ...), and each rank reports figures measured on itself:

- CPU time (``time.process_time``: user + system CPU of the whole process, every thread), summed
  over the ranks: what the machine spent, much less sensitive to other programs sharing the
  cores than wall time;
- wall time (``time.perf_counter``) on rank 0;
- minor page faults (``ru_minflt``) summed over the ranks: each is a fresh page handed to the
  process, a count that load does not change;
- peak resident memory per rank (VmHWM).

The settings each variant's processes ran under (glibc's malloc settings set by ``mallopt`` and
by ``MALLOC_*`` variables, torch's threads, ``OMP_NUM_THREADS``) are reported with the figures.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import torch

MiB = 2**20


def mark() -> dict[str, float]:
    """This process's counters now: CPU seconds (and of them, those in the kernel), wall seconds,
    minor page faults."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu": time.process_time(),
        "sys": usage.ru_stime,
        "wall": time.perf_counter(),
        "minflt": float(usage.ru_minflt),
    }


def peak_rss_kib() -> int:
    """The process's peak resident memory since it started or since ``reset_peak()`` (KiB)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # VmHWM back to the current RSS


def settings(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The process-wide settings a variant ran under: threads, and malloc's settings (what
    trainmesh's host-memory policy applied, where it did, and any ``MALLOC_*`` variable)."""
    from trainmesh.utilities import host_memory

    found: dict[str, Any] = {
        "torch_threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "malloc_env": {
            k: v
            for k, v in os.environ.items()
            if k.startswith(("MALLOC_", "GLIBC_TUNABLES", "THP_MEM_ALLOC", "PYTORCH_"))
        },
        "mallopt": dict(host_memory.applied()),
        "torch_huge_pages": host_memory.huge_pages_in_effect(),
    }
    return {**found, **(extra or {})}


def write_result(out: str, rank: int, figures: dict[str, Any]) -> None:
    with open(f"{out}.rank{rank}", "w") as file:
        json.dump(figures, file)


def run_ranks(
    script: str, arguments: Sequence[str], *, world: int, timeout: float, env: dict[str, str], launcher: bool = True
) -> list[dict]:
    """Start ``world`` fresh processes of ``script --worker ... --out FILE`` with torchrun's
    environment (``launcher``; else none: a plain process, rank 0), wait for them, and return
    each rank's figures (what it wrote to ``FILE.rank{r}``)."""
    from trainmesh.launchers.environments import find_free_port

    port = find_free_port()
    with tempfile.TemporaryDirectory() as root:
        out = os.path.join(root, "result")
        children = []
        for rank in range(world):
            rank_env = {**os.environ, **env}
            if launcher:
                rank_env.update(launcher_env(rank, world, port))
            command = [sys.executable, script, *arguments, "--out", out]
            children.append(
                subprocess.Popen(
                    command,
                    env=rank_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )
        outputs = _wait_all(children, timeout)
        failed = [(r, c.returncode) for r, c in enumerate(children) if c.returncode != 0]
        if failed:
            raise SystemExit(f"{' '.join(arguments)}: ranks {failed} failed; output:\n" + "\n".join(outputs))
        results = []
        for rank in range(world):
            with open(f"{out}.rank{rank}") as file:
                results.append(json.load(file))
        return results


def launcher_env(rank: int, world: int, port: int) -> dict[str, str]:
    """torchrun's environment for one rank: the Trainer takes the processes as a launcher's."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RUN_ID": f"isolated-{port}",
    }


def _wait_all(children: list[subprocess.Popen], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    outputs = []
    for child in children:
        try:
            output, _ = child.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in children:
                if other.poll() is None:
                    os.killpg(other.pid, signal.SIGKILL)
            output, _ = child.communicate()
            raise SystemExit(f"no result after {timeout}s; output:\n{output}") from None
        outputs.append(output)
    return outputs


def spread(values: Sequence[float], scale: float = 1.0, digits: int = 3) -> str:
    """median (min-max) of ``values`` times ``scale``."""
    ordered = sorted(v * scale for v in values)
    return f"{statistics.median(ordered):.{digits}f} ({ordered[0]:.{digits}f}-{ordered[-1]:.{digits}f})"


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def per_step(marks: list[dict[str, float]], warmup: int) -> list[dict[str, float]]:
    """Each step's CPU, wall and minor faults from the marks taken at each step's end (the
    first mark at the loop's start), leaving out the first ``warmup`` steps."""
    steps = [{k: b[k] - a[k] for k in a} for a, b in zip(marks, marks[1:])]
    return steps[warmup:]


def run_figures(ranks: list[dict], warmup: int) -> dict[str, float]:
    """One run's median per-step CPU (summed over ranks), wall (rank 0), faults (summed), and peak RSS."""
    per_rank = [per_step(r["marks"], warmup) for r in ranks]
    count = min(len(s) for s in per_rank)
    cpu = [sum(s[i]["cpu"] for s in per_rank) for i in range(count)]
    faults = [sum(s[i]["minflt"] for s in per_rank) for i in range(count)]
    system = [sum(s[i].get("sys", 0.0) for s in per_rank) for i in range(count)]
    wall = [per_rank[0][i]["wall"] for i in range(count)]
    return {
        "cpu": statistics.median(cpu),
        "wall": statistics.median(wall),
        "minflt": statistics.median(faults),
        "sys": statistics.median(system),
        "peak_mib": max(r["peak_rss_kib"] for r in ranks) / 1024,
        "steady_peak_mib": max(r.get("steady_peak_rss_kib", 0) for r in ranks) / 1024,
    }
