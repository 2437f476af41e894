"""The scaling table on the terminal, and the same rows as CSV, JSON and (with matplotlib) PNG."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from trainmesh.scaling.analysis import ScalingRow

_COLUMNS = (
    "N",
    "batch/rank",
    "step ms",
    "samples/s",
    "min-max",
    "tokens/s",
    "speedup",
    "efficiency",
    "Karp-Flatt e",
    "comm %",
    "MFU",
    "peak MB/rank",
)


def format_row(row: ScalingRow) -> list[str]:
    """The table's cells for ``row``: the same text the terminal and progress lines show."""
    return [
        str(row.processes),
        str(row.per_rank_batch),
        f"{row.step_ms:.2f}",
        f"{row.samples_per_s:.0f}",
        f"{row.samples_per_s_min:.0f}-{row.samples_per_s_max:.0f}",
        "-" if row.tokens_per_s is None else f"{row.tokens_per_s:.0f}",
        f"{row.speedup:.2f}",
        f"{row.efficiency:.2f}",
        "-" if row.karp_flatt is None else f"{row.karp_flatt:.3f}",
        f"{row.comm_share * 100:.1f}",
        "-" if row.mfu is None else f"{row.mfu * 100:.1f}%",
        "-" if row.peak_memory_mb is None else f"{row.peak_memory_mb:.0f}",
    ]


def format_table(mode: str, rows: list[ScalingRow]) -> str:
    """A plain-text table of one mode's rows.

    >>> from trainmesh.scaling.analysis import Measurement, scaling_rows
    >>> print(format_table("weak", scaling_rows("weak", [Measurement(1, 8, [0.01], [0.01])])).splitlines()[0])
    weak scaling (per-rank batch fixed)
    """
    title = f"{mode} scaling ({'global batch fixed' if mode == 'strong' else 'per-rank batch fixed'})"
    cells = [list(_COLUMNS)] + [format_row(row) for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS))]
    lines = [title] + ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in cells]
    return "\n".join(lines)


def write_csv(path: Path, rows: list[ScalingRow]) -> None:
    """One line per (mode, N), the columns of :class:`ScalingRow`."""
    fields = list(rows[0].as_dict()) if rows else []
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow(row.as_dict())


def write_json(path: Path, rows: list[ScalingRow], settings: dict[str, Any]) -> None:
    """The rows with the settings they were measured under (so a file says what it measured)."""
    path.write_text(json.dumps({"settings": settings, "rows": [row.as_dict() for row in rows]}, indent=2) + "\n")


def write_png(path: Path, rows: list[ScalingRow]) -> bool:
    """Throughput against N with the ideal (linear) line, and efficiency against N, one line
    per mode. Returns False, writing nothing, when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    figure, (throughput_axes, efficiency_axes) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in sorted({row.mode for row in rows}):
        mine = [row for row in rows if row.mode == mode]
        ns = [row.processes for row in mine]
        throughput_axes.plot(ns, [row.samples_per_s for row in mine], "o-", label=f"{mode}: measured")
        # Ideal: the smallest N's throughput times N / N_smallest.
        ideal = [mine[0].samples_per_s * n / ns[0] for n in ns]
        throughput_axes.plot(ns, ideal, "--", label=f"{mode}: ideal (linear)")
        efficiency_axes.plot(ns, [row.efficiency for row in mine], "o-", label=mode)
    efficiency_axes.axhline(1.0, linestyle="--", color="grey", label="ideal")
    throughput_axes.set(xlabel="processes (N)", ylabel="throughput (samples/s)", title="Throughput")
    # One label for both modes: strong efficiency is speedup / N, weak is T1 / TN (the same
    # ratio of throughputs), so "speedup / N" would misdescribe the weak line.
    efficiency_axes.set(
        xlabel="processes (N)",
        ylabel="parallel efficiency",
        title="Efficiency",
        ylim=(0, 1.1 * max([1.0] + [row.efficiency for row in rows])),
    )
    for axes in (throughput_axes, efficiency_axes):
        axes.set_xticks(sorted({row.processes for row in rows}))
        axes.legend()
        axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def write_reports(out_dir: Path, rows: list[ScalingRow], settings: dict[str, Any]) -> list[Path]:
    """scaling.csv, scaling.json and scaling.png (when matplotlib is installed) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "scaling.csv", out_dir / "scaling.json"]
    write_csv(written[0], rows)
    write_json(written[1], rows, settings)
    if write_png(out_dir / "scaling.png", rows):
        written.append(out_dir / "scaling.png")
    return written
