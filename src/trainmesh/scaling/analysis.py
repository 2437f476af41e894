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

from trainmesh.scaling.load import MachineLoad

MODES = ("strong", "weak")
# Efficiency at which more processes still pay: below it, most of each added process is lost.
PAYS_EFFICIENCY = 0.7
# Efficiency above this is flagged superlinear and never counted as paying: faster than linear is
# almost always noise, contention slowing the baseline, or a working set that fits in cache once
# split, none of which a user renting more devices will get.
SUPERLINEAR_EFFICIENCY = 1.05
# The verdict is withheld when a row's windows disagree by more than this share of their median
# throughput ((max - min) / median): the machine's load changed while measuring.
SPREAD_BOUND = 0.2


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
    threads: int | None = None  # torch's intra-op threads in each rank, as the worker read them back
    load: MachineLoad | None = None  # the machine's load before and during this N's launch


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
    noisy: bool = False  # superlinear, or windows spread beyond SPREAD_BOUND
    spread: float = 0.0  # (max - min) / median of the windows' throughput
    efficiency_min: float = 1.0  # the slowest and fastest window's efficiency
    efficiency_max: float = 1.0
    superlinear: bool = False  # efficiency above SUPERLINEAR_EFFICIENCY: flagged, never "pays"
    threads: int | None = None
    cpus: int | None = None  # the machine's CPUs, for the load figures below
    others_busy_before: float | None = None  # CPUs other processes kept busy before / during this N
    others_busy_during: float | None = None
    loadavg_during: float | None = None
    busy: bool = False  # other processes used over a quarter of the CPUs (see load.BUSY_SHARE)

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
    throughput spread is the fastest and slowest window, and so is the efficiency's.
    """
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; use one of {MODES}")
    if not runs:
        raise ValueError("no measurements to analyse; measure at least one process count")
    runs = sorted(runs, key=lambda run: run.processes)
    base = runs[0]
    base_throughput = _throughput(base, statistics.median(base.step_s))
    return [_row(mode, run, base.processes, base_throughput) for run in runs]


def _row(mode: str, run: Measurement, base_processes: int, base_throughput: float) -> ScalingRow:
    step = statistics.median(run.step_s)
    throughput = _throughput(run, step)
    relative_n = run.processes / base_processes
    ideal = base_throughput * relative_n
    speedup = throughput / base_throughput
    efficiency = speedup / relative_n
    no_sync = statistics.median(run.no_sync_step_s)
    slowest, fastest = _throughput(run, max(run.step_s)), _throughput(run, min(run.step_s))
    spread = (fastest - slowest) / throughput
    superlinear = efficiency > SUPERLINEAR_EFFICIENCY
    load = run.load
    return ScalingRow(
        mode=mode,
        processes=run.processes,
        per_rank_batch=run.per_rank_batch,
        global_batch=run.per_rank_batch * run.processes,
        step_ms=step * 1e3,
        samples_per_s=throughput,
        samples_per_s_min=slowest,
        samples_per_s_max=fastest,
        speedup=speedup,
        efficiency=efficiency,
        karp_flatt=karp_flatt(speedup, relative_n),
        # With one process there is nothing to synchronise; the difference is noise.
        comm_share=max(0.0, (step - no_sync) / step) if run.processes > 1 else 0.0,
        peak_memory_mb=None if run.peak_memory_bytes is None else run.peak_memory_bytes / 2**20,
        tokens_per_s=None if run.tokens_per_rank_step is None else run.tokens_per_rank_step * run.processes / step,
        mfu=model_flops_utilisation(run.flops_per_rank_step, step, run.peak_flops),
        noisy=superlinear or spread > SPREAD_BOUND,
        spread=spread,
        efficiency_min=slowest / ideal,
        efficiency_max=fastest / ideal,
        superlinear=superlinear,
        threads=run.threads,
        cpus=None if load is None else load.cpus,
        others_busy_before=None if load is None else load.others_before,
        others_busy_during=None if load is None else load.others_during,
        loadavg_during=None if load is None else load.loadavg_during,
        busy=load is not None and load.busy(),
    )


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
    """Plain sentences saying what more processes buy, for one mode's rows.

    The rule: N pays while, from the smallest N up, each next N raises the throughput and keeps a
    parallel efficiency of at least ``PAYS_EFFICIENCY`` (0.7) without exceeding
    ``SUPERLINEAR_EFFICIENCY`` (1.05): a superlinear row is flagged (noise, contention or cache
    effects) and never pays. The verdict is withheld, with the reason, when any N's timed windows
    disagree by more than ``SPREAD_BOUND`` (20%) of their median. Where the throughput peaks before
    the largest N, that is said; so is a machine other processes kept busy while measuring.

    >>> from trainmesh.scaling.analysis import Measurement, scaling_rows
    >>> verdict(scaling_rows("strong", [Measurement(1, 64, [0.010], [0.010]), Measurement(2, 32, [0.0145], [0.01])]))
    'N=2 runs at 0.34 efficiency (windows 0.34-0.34): 2 processes finish 0.69x as fast as 1; on this machine stay at N=1.'
    """
    if not rows:
        return "nothing measured."
    rows = sorted(rows, key=lambda row: row.processes)
    if len(rows) == 1:
        return f"only N={rows[0].processes} measured: nothing to compare."
    disagreeing = [row for row in rows if row.spread > SPREAD_BOUND]
    if disagreeing:
        text = (
            f"verdict withheld: the timed windows disagree beyond the {SPREAD_BOUND:.0%} bound at "
            + ", ".join(
                f"N={row.processes} ({_percent(row.spread)}: {row.samples_per_s_min:.0f}-{row.samples_per_s_max:.0f} "
                "samples/s)"
                for row in disagreeing
            )
            + "; the machine's load changed while measuring: rerun on a quieter machine or with more "
            "--windows/--steps."
        )
    else:
        reached, reason = _pays_up_to(rows)
        text = _advice(rows, reached, reason) + _peak(rows)
    return text + _superlinear_note(rows) + _busy_note(rows)


def _percent(share: float) -> str:
    """Whole percent, or one decimal where whole would read as the bound itself (20% beyond 20%).

    >>> _percent(0.934), _percent(0.203)
    ('93%', '20.3%')
    """
    return f"{share:.1%}" if round(share, 2) == SPREAD_BOUND else f"{share:.0%}"


def _pays_up_to(rows: list[ScalingRow]) -> tuple[int, str | None]:
    """The index of the largest N that pays, and why the next one does not (None: all pay)."""
    reached = 0
    for i in range(1, len(rows)):
        row = rows[i]
        if row.superlinear:
            return reached, "superlinear"
        if row.samples_per_s <= rows[reached].samples_per_s:
            return reached, "no gain"
        if row.efficiency < PAYS_EFFICIENCY:
            return reached, "low efficiency"
        reached = i
    return reached, None


def _advice(rows: list[ScalingRow], reached: int, reason: str | None) -> str:
    base, best = rows[0], rows[reached]
    after = rows[reached + 1] if reason is not None else None
    if after is not None and reached == 0:
        if reason == "superlinear":
            return (
                f"N={after.processes} measured {after.efficiency:.2f} efficiency, superlinear: not counted as "
                f"paying, so no N past {base.processes} is shown to pay; rerun on a quieter machine."
            )
        return (
            f"N={after.processes} runs at {after.efficiency:.2f} efficiency ({_windows(after)}): "
            f"{after.processes} processes {_pace(after)} {base.processes}; on this machine stay at N={base.processes}."
        )
    text = (
        f"scaling pays up to N={best.processes} (efficiency {best.efficiency:.2f}, {_windows(best)}; "
        f"threshold {PAYS_EFFICIENCY})"
    )
    if after is None:
        return text + ", the most measured: more processes may pay too."
    if reason == "superlinear":
        return text + f"; N={after.processes} measured {after.efficiency:.2f} efficiency, superlinear: not counted."
    if reason == "no gain":
        return text + (
            f"; N={after.processes} adds no throughput ({after.samples_per_s:.0f} samples/s against "
            f"{best.samples_per_s:.0f})."
        )
    gain = (after.samples_per_s / best.samples_per_s - 1) * 100
    return text + f"; N={after.processes} adds {gain:.0f}% throughput at {after.efficiency:.2f} efficiency."


def _windows(row: ScalingRow) -> str:
    return f"windows {row.efficiency_min:.2f}-{row.efficiency_max:.2f}"


def _peak(rows: list[ScalingRow]) -> str:
    """Where throughput is highest, when that is neither the smallest N (the advice says so) nor
    the largest (more may pay)."""
    peak = max(rows, key=lambda row: row.samples_per_s)
    last = rows[-1]
    if peak is last or peak is rows[0]:
        return ""
    return (
        f" Throughput peaks at N={peak.processes} ({peak.samples_per_s:.0f} samples/s) and is "
        f"{last.samples_per_s:.0f} at N={last.processes}."
    )


def _superlinear_note(rows: list[ScalingRow]) -> str:
    flagged = [row for row in rows if row.superlinear]
    if not flagged:
        return ""
    return (
        f" Flagged superlinear (efficiency above {SUPERLINEAR_EFFICIENCY}): "
        + ", ".join(f"N={row.processes} ({row.efficiency:.2f})" for row in flagged)
        + "; faster than linear here means noise, contention slowing the smaller N, or cache effects."
        + _threads_hint(rows)
    )


def _threads_hint(rows: list[ScalingRow]) -> str:
    """Different thread counts across N are the likeliest cause on a CPU: say how to rule it out."""
    threads = {row.processes: row.threads for row in rows if row.threads is not None}
    if len(set(threads.values())) < 2:
        return ""
    each = ", ".join(f"{t} at N={n}" for n, t in threads.items())
    return (
        f" The threads per process differed ({each}): a process with more threads than the free cores "
        "spin-waits, so rerun with --threads 1 to give every N the same threads."
    )


def _busy_note(rows: list[ScalingRow]) -> str:
    busy = [row for row in rows if row.busy]
    if not busy:
        return ""
    worst = max(max(x for x in (row.others_busy_before, row.others_busy_during) if x is not None) for row in busy)
    return (
        f" Caution: other processes kept up to {worst:.2f} of {busy[0].cpus} CPUs busy around "
        + ",".join(f"N={row.processes}" for row in busy)
        + ": these figures measure sharing the machine, not scaling alone."
    )


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
