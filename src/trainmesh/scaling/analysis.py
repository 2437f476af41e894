"""Scaling arithmetic on recorded timings: no processes, no torch, so it is cheap to test.

Given, for each process count N, the step times of a few timed windows (the slowest rank's step,
with and without gradient sync), this turns them into the rows ``trainmesh scale`` prints:
throughput, speedup over the smallest N, parallel efficiency, the Karp-Flatt serial fraction and
the share of the step spent communicating.

>>> runs = [Measurement(processes=1, per_rank_batch=64, step_s=[0.010], no_sync_step_s=[0.010]),
...         Measurement(processes=2, per_rank_batch=32, step_s=[0.008], no_sync_step_s=[0.006])]
>>> rows = scaling_rows("strong", runs)
>>> round(rows[1].speedup, 3), round(rows[1].efficiency, 3), round(rows[1].karp_flatt, 3)
(1.25, 0.625, 0.6)
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

MODES = ("strong", "weak")
# Efficiency at which more processes still pay: below it, most of each added process is lost.
PAYS_EFFICIENCY = 0.7
# A row is flagged noisy when its efficiency is above this (faster than linear is almost always
# contention or warm-up in the baseline, not real superlinear scaling) ...
NOISE_EFFICIENCY = 1.05
# ... or when its windows' throughput spread (max - min) is wider than this share of the median.
NOISE_SPREAD = 0.5


@dataclass(frozen=True)
class Measurement:
    """What one launch at ``processes`` ranks recorded: per timed window, the median step time in
    seconds of the slowest rank, with gradient sync (``step_s``) and without (``no_sync_step_s``)."""

    processes: int
    per_rank_batch: int
    step_s: list[float]
    no_sync_step_s: list[float]
    peak_memory_bytes: int | None = None
    # Counted once on one rank's step (forward and backward); None where not counted.
    flops_per_rank_step: int | None = None
    # B * T of an integer (B, T) input per rank's step (the throughput module's rule); None otherwise.
    tokens_per_rank_step: int | None = None
    peak_flops: float | None = None  # per device: the user's --peak-flops or the device table's


@dataclass(frozen=True)
class ScalingRow:
    """One line of the scaling table (see :func:`scaling_rows`)."""

    mode: str
    processes: int
    per_rank_batch: int
    global_batch: int
    step_ms: float
    samples_per_s: float
    samples_per_s_min: float
    samples_per_s_max: float
    speedup: float
    efficiency: float
    karp_flatt: float | None  # undefined at the baseline (N equal to the smallest N)
    comm_share: float
    peak_memory_mb: float | None
    tokens_per_s: float | None = None
    mfu: float | None = None  # model FLOPs utilisation: achieved FLOP/s per device over its peak
    noisy: bool = False  # see NOISE_EFFICIENCY and NOISE_SPREAD

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def karp_flatt(speedup: float, processes: float) -> float | None:
    """The experimentally determined serial fraction e = (1/S - 1/N) / (1 - 1/N).

    A constant e as N grows means a fixed serial part (Amdahl); a growing e means overhead that
    grows with N (communication, imbalance): more processes will not pay.

    >>> karp_flatt(1.6, 2)
    0.25
    >>> karp_flatt(1.0, 1) is None
    True
    """
    if processes <= 1 or speedup <= 0:
        return None
    return (1 / speedup - 1 / processes) / (1 - 1 / processes)


def scaling_rows(mode: str, runs: list[Measurement]) -> list[ScalingRow]:
    """The table's rows for ``runs`` (any order), relative to the run with the fewest processes.

    Speedup S = X_N / X_base (throughput, samples/s); efficiency E = S / (N / N_base), which in
    weak scaling equals T_base / T_N; comm share = (T_sync - T_no_sync) / T_sync, clipped at 0
    (noise can make the synced step look faster). Step times are medians over the windows; the
    throughput spread is the fastest and slowest window.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; use one of {MODES}")
    if not runs:
        raise ValueError("no measurements to analyse; measure at least one process count")
    runs = sorted(runs, key=lambda run: run.processes)
    base = runs[0]
    base_throughput = _throughput(base, statistics.median(base.step_s))
    rows = []
    for run in runs:
        step = statistics.median(run.step_s)
        throughput = _throughput(run, step)
        speedup = throughput / base_throughput
        relative_n = run.processes / base.processes
        no_sync = statistics.median(run.no_sync_step_s)
        slowest, fastest = _throughput(run, max(run.step_s)), _throughput(run, min(run.step_s))
        rows.append(
            ScalingRow(
                mode=mode,
                processes=run.processes,
                per_rank_batch=run.per_rank_batch,
                global_batch=run.per_rank_batch * run.processes,
                step_ms=step * 1e3,
                samples_per_s=throughput,
                samples_per_s_min=slowest,
                samples_per_s_max=fastest,
                speedup=speedup,
                efficiency=speedup / relative_n,
                karp_flatt=karp_flatt(speedup, relative_n),
                # With one process there is nothing to synchronise; the difference is noise.
                comm_share=max(0.0, (step - no_sync) / step) if run.processes > 1 else 0.0,
                peak_memory_mb=None if run.peak_memory_bytes is None else run.peak_memory_bytes / 2**20,
                tokens_per_s=None
                if run.tokens_per_rank_step is None
                else run.tokens_per_rank_step * run.processes / step,
                mfu=model_flops_utilisation(run.flops_per_rank_step, step, run.peak_flops),
                noisy=speedup / relative_n > NOISE_EFFICIENCY or (fastest - slowest) > NOISE_SPREAD * throughput,
            )
        )
    return rows


def model_flops_utilisation(flops_per_rank_step: int | None, step_s: float, peak_flops: float | None) -> float | None:
    """MFU: one rank's step FLOPs per second over one device's peak; None when either is unknown.

    Every rank runs the same step, so one rank's share over one device's peak is the whole job's.

    >>> model_flops_utilisation(3_000, 0.5, 30_000.0)
    0.2
    >>> model_flops_utilisation(3_000, 0.5, None) is None
    True
    """
    if flops_per_rank_step is None or not peak_flops or step_s <= 0:
        return None
    return flops_per_rank_step / step_s / peak_flops


def verdict(rows: list[ScalingRow]) -> str:
    """One or two plain sentences saying what more processes buy, for one mode's rows.

    The rule: scaling pays up to the largest N reached while every N measured so far keeps a
    parallel efficiency of at least ``PAYS_EFFICIENCY`` (0.7). Beyond it the next N's added
    throughput is stated; when even the second N falls below, the advice is to stay at the
    smallest. Rows flagged noisy (efficiency above 1.05, or a window spread wider than half the
    median) add "noisy: rerun with more --windows/--steps".

    >>> from trainmesh.scaling.analysis import Measurement, scaling_rows
    >>> verdict(scaling_rows("strong", [Measurement(1, 64, [0.010], [0.010]), Measurement(2, 32, [0.0145], [0.01])]))
    'N=2 runs at 0.34 efficiency: 2 processes finish 0.69x as fast as 1; on this machine stay at N=1.'
    """
    if not rows:
        return "nothing measured."
    rows = sorted(rows, key=lambda row: row.processes)
    base = rows[0]
    reached = 0
    while reached + 1 < len(rows) and rows[reached + 1].efficiency >= PAYS_EFFICIENCY:
        reached += 1
    best = rows[reached]
    if len(rows) == 1:
        text = f"only N={base.processes} measured: nothing to compare."
    elif reached == 0:
        after = rows[1]
        text = (
            f"N={after.processes} runs at {after.efficiency:.2f} efficiency: {after.processes} processes "
            f"{_pace(after)} {base.processes}; on this machine stay at N={base.processes}."
        )
    elif reached == len(rows) - 1:
        text = (
            f"scaling pays up to N={best.processes} (efficiency >= {PAYS_EFFICIENCY}), the most measured: "
            "more processes may pay too."
        )
    else:
        after = rows[reached + 1]
        gain = (after.samples_per_s / best.samples_per_s - 1) * 100
        text = (
            f"scaling pays up to N={best.processes} (efficiency >= {PAYS_EFFICIENCY}); "
            f"N={after.processes} adds {gain:.0f}% throughput at {after.efficiency:.2f} efficiency."
        )
    noisy = [str(row.processes) for row in rows if row.noisy]
    if noisy:
        text += f" N={','.join(noisy)} noisy: rerun with more --windows/--steps."
    return text


def _pace(row: ScalingRow) -> str:
    # Strong scaling runs the same global batch, so speedup is how much sooner a step finishes;
    # weak scaling runs a bigger one, so it is samples per second.
    if row.mode == "strong":
        return f"finish {row.speedup:.2f}x as fast as"
    return f"process {row.speedup:.2f}x the samples/s of"


def _throughput(run: Measurement, step_s: float) -> float:
    return run.per_rank_batch * run.processes / step_s if step_s > 0 else math.inf


def per_rank_batch(mode: str, batch_size: int, processes: int) -> int:
    """The batch each rank runs: ``batch_size`` is global in strong scaling, per rank in weak.

    >>> per_rank_batch("strong", 256, 4), per_rank_batch("weak", 256, 4)
    (64, 256)
    """
    if mode == "weak":
        return batch_size
    if batch_size % processes:
        raise ValueError(
            f"strong scaling splits the global batch {batch_size} over {processes} processes, "
            f"which does not divide it; pass a batch size that is a multiple of {processes}"
        )
    return batch_size // processes
