"""The scaling table on the terminal, and the same rows as CSV, JSON and (with matplotlib) PNG."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainmesh.scaling.analysis import SUPERLINEAR_EFFICIENCY, ScalingRow
from trainmesh.scaling.plot import PlotSeries, matplotlib_missing, write_png

_COLUMNS = (
    "N",
    "threads",
    "batch/rank",
    "step ms",
    "samples/s",
    "min-max",
    "spread",
    "tokens/s",
    "speedup",
    "efficiency",
    "Karp-Flatt e",
    "comm %",
    "MFU",
    "peak MB/rank",
    "others busy",
)
# Marks a superlinear efficiency in the table and the progress lines; the table's footnote says why.
SUPERLINEAR_MARK = "*"


def format_row(row: ScalingRow) -> list[str]:
    """The table's cells for ``row``: the same text the terminal and progress lines show."""
    return [
        str(row.processes),
        "-" if row.threads is None else str(row.threads),
        str(row.per_rank_batch),
        f"{row.step_ms:.2f}",
        f"{row.samples_per_s:.0f}",
        f"{row.samples_per_s_min:.0f}-{row.samples_per_s_max:.0f}",
        f"{row.spread * 100:.0f}%",
        "-" if row.tokens_per_s is None else f"{row.tokens_per_s:.0f}",
        f"{row.speedup:.2f}",
        efficiency_cell(row),
        "-" if row.karp_flatt is None else f"{row.karp_flatt:.3f}",
        f"{row.comm_share * 100:.1f}",
        "-" if row.mfu is None else f"{row.mfu * 100:.1f}%",
        "-" if row.peak_memory_mb is None else f"{row.peak_memory_mb:.0f}",
        "-" if row.others_busy_during is None else f"{row.others_busy_during:.2f}/{row.cpus}",
    ]


def efficiency_cell(row: ScalingRow) -> str:
    """The efficiency, marked when superlinear: such a figure is never shown bare."""
    return f"{row.efficiency:.2f}" + (SUPERLINEAR_MARK if row.superlinear else "")


def progress_line(row: ScalingRow) -> str:
    """What the sweep prints as each (mode, N) is measured."""
    flag = " (superlinear: flagged, not counted as paying)" if row.superlinear else ""
    return (
        f"[{row.mode}] N={row.processes}: {row.samples_per_s:.0f} samples/s "
        f"(windows {row.samples_per_s_min:.0f}-{row.samples_per_s_max:.0f}), speedup {row.speedup:.2f}, "
        f"efficiency {row.efficiency:.2f}{flag}, comm {row.comm_share * 100:.0f}%"
    )


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
    if any(row.superlinear for row in rows):
        lines.append(
            f"{SUPERLINEAR_MARK} superlinear: efficiency above {SUPERLINEAR_EFFICIENCY} (noise, contention slowing the "
            "smaller N, or cache effects); flagged and never counted as paying"
        )
    lines.append(
        "spread: (max - min) / median of the windows' samples/s; others busy: CPUs other processes used during the N"
    )
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


def write_reports(
    out_dir: Path,
    rows: list[ScalingRow],
    settings: dict[str, Any],
    *,
    extra_series: Sequence[PlotSeries] = (),
    say: Callable[[str], Any] = print,
) -> list[Path]:
    """scaling.csv, scaling.json and scaling.png in ``out_dir``; without matplotlib, ``say`` one
    line that no PNG was written and why."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "scaling.csv", out_dir / "scaling.json"]
    write_csv(written[0], rows)
    write_json(written[1], rows, settings)
    missing = matplotlib_missing()
    if missing is None:
        write_png(out_dir / "scaling.png", rows, settings, extra_series)
        written.append(out_dir / "scaling.png")
    else:
        say(f"no scaling.png written: {missing}")
    return written
