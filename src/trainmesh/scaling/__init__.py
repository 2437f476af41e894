"""Scaling analysis: what more processes buy a model (``trainmesh scale``).

>>> from trainmesh.scaling import run_scaling
>>> rows = run_scaling(max_processes=2, out_dir="scaling")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from trainmesh.scaling.analysis import MODES, Measurement, ScalingRow, karp_flatt, per_rank_batch, scaling_rows, verdict

DEMO_MODEL = "trainmesh.demo:DigitsClassifier"
DEMO_DATA = "trainmesh.data.digits:DigitsDataModule"


def process_counts(*, processes: list[int] | None = None, max_processes: int | None = None) -> list[int]:
    """The N to measure: ``processes`` as given, or 1, 2, 4, ... up to ``max_processes``.

    >>> process_counts(max_processes=6)
    [1, 2, 4]
    """
    if processes:
        if any(n < 1 for n in processes):
            raise ValueError(f"processes={processes}: every count must be at least 1")
        return sorted(set(processes))
    if max_processes is None or max_processes < 1:
        raise ValueError(f"max_processes={max_processes!r}; pass a positive count, e.g. --max-processes 2")
    return [2**i for i in range(max_processes.bit_length()) if 2**i <= max_processes]


def run_scaling(
    *,
    model: str = DEMO_MODEL,
    model_kwargs: dict[str, Any] | None = None,
    data: str = DEMO_DATA,
    data_kwargs: dict[str, Any] | None = None,
    processes: list[int] | None = None,
    max_processes: int | None = 2,
    mode: str = "both",
    strategy: str = "ddp",
    accelerator: str = "cpu",
    precision: str = "32-true",
    batch_size: int | None = None,
    warmup_steps: int = 5,
    steps_per_window: int = 20,
    windows: int = 3,
    out_dir: str | Path = "scaling",
    peak_flops: float | None = None,
    threads: int | None = None,
    print_fn: Any = print,
    projection: Any = None,
) -> list[ScalingRow]:
    """Measure the model's training step at each N, print the table and its verdict, write CSV/JSON/PNG.

    ``batch_size`` is the global batch in strong scaling and the per-rank batch in weak scaling
    (default: the data's ``batch_size`` times the largest N for strong, times 1 for weak).
    ``peak_flops`` (per device) gives the MFU column where the device table has no figure (CPUs).
    ``projection`` (a :class:`~trainmesh.scaling.projection.ProjectionSettings`): after the sweep,
    the model calibrated on the measured N and projected on its links (``projection.json``).
    ``threads`` fixes each rank's torch threads at every N (else ``OMP_NUM_THREADS`` if set, else
    the physical cores // the largest N, the same at every N); the policy is printed, and so is the machine's load around each N.
    """
    from trainmesh.accelerators import physical_cpu_count
    from trainmesh.scaling.measure import Workload
    from trainmesh.scaling.report import format_table, write_reports

    _check_settings(strategy, precision, projection)
    modes = list(MODES) if mode == "both" else [mode]
    if mode != "both" and mode not in MODES:
        raise ValueError(f"mode={mode!r}; use 'strong', 'weak' or 'both'")
    counts = process_counts(processes=processes, max_processes=max_processes)
    base_batch = batch_size or int((data_kwargs or {}).get("batch_size", 0) or _default_batch(data))
    batches = {m: base_batch * (max(counts) if m == "strong" and batch_size is None else 1) for m in modes}
    hardware, what, device = _hardware(accelerator)
    _warn_oversubscribed(max(counts), hardware, what)
    cores = physical_cpu_count()
    fixed, policy = thread_policy(threads, cores, counts)
    print_fn(policy)
    workload = Workload(
        model,
        dict(model_kwargs or {}),
        data,
        dict(data_kwargs or {}),
        strategy=strategy,
        accelerator=accelerator,
        precision=precision,
        warmup_steps=warmup_steps,
        steps_per_window=steps_per_window,
        windows=windows,
        peak_flops=peak_flops,
        threads=fixed,
        cores=cores,
    )
    measured = _sweep(workload, counts, batches, print_fn)
    rows = [row for m in modes for row in scaling_rows(m, measured[m])]
    for m in modes:
        mine = [row for row in rows if row.mode == m]
        print_fn("\n" + format_table(m, mine) + "\n" + verdict(mine))
    settings = _report_settings(
        model, data, strategy, accelerator, precision, device, hardware, what, policy, batches, workload
    )
    projected: list[Any] = []
    if projection is not None:  # calibrated on what was just measured, then projected (dashed on the plot)
        projected = _project(
            measured, model, dict(model_kwargs or {}), strategy, precision, projection, Path(out_dir), print_fn
        )
    for path in write_reports(Path(out_dir), rows, settings, extra_series=projected, say=print_fn):
        print_fn(f"wrote {path}")
    return rows


def _report_settings(
    model: str,
    data: str,
    strategy: str,
    accelerator: str,
    precision: str,
    device: str,
    hardware: int,
    what: str,
    policy: str,
    batches: dict[str, int],
    workload: Any,
) -> dict[str, Any]:
    """What scaling.json records beside the rows, and the plot's title is made from."""
    return {
        "model": model,
        "data": data,
        "strategy": strategy,
        "accelerator": accelerator,
        "precision": precision,
        "device": device,
        "hardware_count": hardware,
        "hardware_what": what,
        "threads": policy,
        "batches": batches,
        "peak_flops": workload.peak_flops,
        "warmup_steps": workload.warmup_steps,
        "steps_per_window": workload.steps_per_window,
        "windows": workload.windows,
        "cpu_count": os.cpu_count(),
    }


def _project(
    measured: dict[str, list[Measurement]],
    model: str,
    model_kwargs: dict[str, Any],
    strategy: str,
    precision: str,
    projection: Any,
    out_dir: Path,
    print_fn: Any,
) -> list[Any]:
    from trainmesh.scaling.project_command import report_sweep_projection

    written, series = report_sweep_projection(
        measured,
        model_path=model,
        model_kwargs=model_kwargs,
        strategy=strategy,
        precision=precision,
        settings=projection,
        out_dir=out_dir,
        print_fn=print_fn,
    )
    print_fn(f"wrote {written}")
    return series


def _check_settings(strategy: str, precision: str, projection: Any) -> None:
    """What every worker would refuse with a traceback each, refused here in one sentence."""
    from trainmesh.precision import normalize_precision
    from trainmesh.strategies import STRATEGIES
    from trainmesh.utilities.suggestions import did_you_mean

    if strategy.lower() != "auto" and strategy.lower() not in STRATEGIES:
        raise ValueError(
            f"strategy={strategy!r} is not known; choose one of: auto, {', '.join(sorted(STRATEGIES))}."
            + did_you_mean(strategy, ["auto", *STRATEGIES])
        )
    normalize_precision(precision)
    if projection is not None:
        from trainmesh.scaling.projection import modelled

        if strategy.lower() not in modelled():
            raise ValueError(
                f"strategy={strategy!r} has no communication model to project with; --link projects "
                f"{', '.join(modelled())}"
            )


def _sweep(workload: Any, counts: list[int], batches: dict[str, int], print_fn: Any) -> dict[str, list[Measurement]]:
    """Measure each N in turn, printing the machine's load around it and each mode's row."""
    from trainmesh.scaling.measure import measure
    from trainmesh.scaling.report import progress_line

    measured: dict[str, list[Measurement]] = {m: [] for m in batches}
    for n in counts:
        runs = measure(workload, n, {m: per_rank_batch(m, batch, n) for m, batch in batches.items()})
        load = next(iter(runs.values())).load
        if load is not None:
            print_fn(f"N={n}: load before: {load.describe_before()}; during: {load.describe_during()}")
        for m, run in runs.items():
            measured[m].append(run)
            print_fn(progress_line(scaling_rows(m, measured[m])[-1]))
    return measured


def thread_policy(threads: int | None, cores: int, counts: list[int]) -> tuple[int, str]:
    """The torch thread count every rank gets at every N, and the line that says where it came from.

    One count for every N keeps the compute per process the same, which is what a scaling sweep
    compares (a GPU does not grow when it is alone). The default, the physical cores // the largest
    N, fits the largest N on the machine without oversubscribing it; sharing all cores out at each
    N instead gives N=1 every core, and on a busy machine a lone many-threaded process spin-waits,
    which made N=1 look 100-300x slower and every larger N superlinear (issue 28).

    >>> thread_policy(None, 2, [1, 2])[1]
    'threads: 1 per process at every N (2 physical cores // the largest N, 2), set in every worker; --threads T sets another count'
    >>> thread_policy(1, 2, [1, 2])
    (1, 'threads: 1 per process at every N (--threads 1), set in every worker')
    """
    from trainmesh.scaling.measure import threads_per_process

    source = f"--threads {threads}"
    if threads is None and os.environ.get("OMP_NUM_THREADS", "").isdigit():
        threads, source = int(os.environ["OMP_NUM_THREADS"]), f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    if threads is not None:
        threads_per_process(1, fixed=threads, cores=cores)  # refuses a count below 1
        return threads, f"threads: {threads} per process at every N ({source}), set in every worker"
    fixed = threads_per_process(max(counts), fixed=None, cores=cores)
    return fixed, (
        f"threads: {fixed} per process at every N ({cores} physical cores // the largest N, {max(counts)}), "
        "set in every worker; --threads T sets another count"
    )


def _default_batch(data_path: str) -> int:
    import inspect

    from trainmesh.utilities.class_paths import import_class

    default = inspect.signature(import_class(data_path, "data")).parameters.get("batch_size")
    return default.default if default is not None and isinstance(default.default, int) else 32


def _hardware(accelerator: str) -> tuple[int, str, str]:
    """(how many devices or physical cores, what they are, a name for the plot's title)."""
    if accelerator == "cuda":
        import torch

        count = torch.cuda.device_count()
        name = torch.cuda.get_device_name(0) if count else "CUDA (none visible)"
        return count, "GPUs", name
    from trainmesh.accelerators import physical_cpu_count

    count = physical_cpu_count()
    return count, "physical CPU cores", f"CPU, {count} physical cores"


def _warn_oversubscribed(largest: int, available: int, what: str) -> None:
    """More processes than cores (or GPUs) measure contention, not scaling: say so up front."""
    if largest > available:
        print(
            f"warning: N={largest} exceeds the {available} {what} here; rows beyond {available} measure "
            "processes sharing hardware, not scaling",
            file=sys.stderr,
        )


__all__ = [
    "MODES",
    "Measurement",
    "ScalingRow",
    "karp_flatt",
    "process_counts",
    "run_scaling",
    "scaling_rows",
    "thread_policy",
    "verdict",
]
