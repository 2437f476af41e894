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
    print_fn: Any = print,
    projection: Any = None,
) -> list[ScalingRow]:
    """Measure the model's training step at each N, print the table and its verdict, write CSV/JSON/PNG.

    ``batch_size`` is the global batch in strong scaling and the per-rank batch in weak scaling
    (default: the data's ``batch_size`` times the largest N for strong, times 1 for weak).
    ``peak_flops`` (per device) gives the MFU column where the device table has no figure (CPUs).
    ``projection`` (a :class:`~trainmesh.scaling.projection.ProjectionSettings`): after the sweep,
    the model calibrated on the measured N and projected on its links (``projection.json``).
    """
    from trainmesh.scaling.measure import Workload, measure
    from trainmesh.scaling.report import format_table, write_reports

    _check_settings(strategy, precision, projection)
    modes = list(MODES) if mode == "both" else [mode]
    if mode != "both" and mode not in MODES:
        raise ValueError(f"mode={mode!r}; use 'strong', 'weak' or 'both'")
    counts = process_counts(processes=processes, max_processes=max_processes)
    base_batch = batch_size or int((data_kwargs or {}).get("batch_size", 0) or _default_batch(data))
    batches = {m: base_batch * (max(counts) if m == "strong" and batch_size is None else 1) for m in modes}
    _warn_oversubscribed(max(counts), accelerator, print_fn)
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
    )
    measured: dict[str, list[Measurement]] = {m: [] for m in modes}
    for n in counts:
        for m, run in measure(workload, n, {m: per_rank_batch(m, batches[m], n) for m in modes}).items():
            measured[m].append(run)
            row = scaling_rows(m, measured[m])[-1]
            print_fn(
                f"[{m}] N={n}: {row.samples_per_s:.0f} samples/s, speedup {row.speedup:.2f}, "
                f"efficiency {row.efficiency:.2f}, comm {row.comm_share * 100:.0f}%"
            )
    rows = [row for m in modes for row in scaling_rows(m, measured[m])]
    for m in modes:
        mine = [row for row in rows if row.mode == m]
        print_fn("\n" + format_table(m, mine) + "\n" + verdict(mine))
    settings = {
        "model": model,
        "data": data,
        "strategy": strategy,
        "accelerator": accelerator,
        "batches": batches,
        "peak_flops": peak_flops,
        "warmup_steps": warmup_steps,
        "steps_per_window": steps_per_window,
        "windows": windows,
        "cpu_count": os.cpu_count(),
    }
    for path in write_reports(Path(out_dir), rows, settings):
        print_fn(f"wrote {path}")
    if projection is not None:  # calibrated on what was just measured, then projected
        _project(measured, model, dict(model_kwargs or {}), strategy, precision, projection, Path(out_dir), print_fn)
    return rows


def _project(
    measured: dict[str, list[Measurement]],
    model: str,
    model_kwargs: dict[str, Any],
    strategy: str,
    precision: str,
    projection: Any,
    out_dir: Path,
    print_fn: Any,
) -> None:
    from trainmesh.scaling.project_command import report_sweep_projection

    written = report_sweep_projection(
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


def _check_settings(strategy: str, precision: str, projection: Any) -> None:
    """What every worker would refuse with a traceback each, refused here in one sentence."""
    from trainmesh.precision import normalize_precision
    from trainmesh.strategies import STRATEGIES

    if strategy.lower() != "auto" and strategy.lower() not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is not known; choose one of: auto, {', '.join(sorted(STRATEGIES))}")
    normalize_precision(precision)
    if projection is not None:
        from trainmesh.scaling.projection import MODELLED

        if strategy.lower() not in MODELLED:
            raise ValueError(
                f"strategy={strategy!r} has no communication model to project with; --link projects "
                f"{', '.join(MODELLED)}"
            )


def _default_batch(data_path: str) -> int:
    import inspect

    from trainmesh.cli.classes import import_class

    default = inspect.signature(import_class(data_path, "data")).parameters.get("batch_size")
    return default.default if default is not None and isinstance(default.default, int) else 32


def _warn_oversubscribed(largest: int, accelerator: str, print_fn: Any) -> None:
    """More processes than cores (or GPUs) measure contention, not scaling: say so up front."""
    if accelerator == "cuda":
        import torch

        available, what = torch.cuda.device_count(), "GPUs"
    else:
        from trainmesh.accelerators import physical_cpu_count

        available, what = physical_cpu_count(), "physical CPU cores"
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
    "verdict",
]
