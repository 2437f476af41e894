"""scaling.png: throughput and efficiency against N, drawn so a person can read the advice off it.

Both panels put N on a log2 axis (1, 2, 4, ... equally spaced), draw each N's min-max over the
timed windows as a bar, the ideal as a dotted line of the same colour, and a vertical line where
this machine's physical cores (or GPUs) end. One colour means one thing in both panels: a mode
(strong, weak) and everything derived from it; grey is reference, red is a flag. Extra series
(e.g. a projection past this machine) are drawn dashed in their mode's colour.

>>> matplotlib_missing() is None or matplotlib_missing().startswith("matplotlib is not installed")
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmesh.scaling.analysis import PAYS_EFFICIENCY, SUPERLINEAR_EFFICIENCY, ScalingRow
from trainmesh.utilities.install_hints import install_hint

# One colour per mode, the same in both panels.
MODE_COLOURS = {"strong": "tab:blue", "weak": "tab:orange"}
FLAG_COLOUR = "tab:red"
REFERENCE_COLOUR = "grey"
# The efficiency panel stops here: a superlinear 55 would squash the 0.7 and 1.0 lines into its
# floor; points above are drawn at the edge with their value written beside them.
EFFICIENCY_TOP = 1.6


@dataclass(frozen=True)
class PlotSeries:
    """A line drawn beside the measured ones, dashed: e.g. projected points for larger N.
    ``samples_per_s`` or ``efficiency`` may be None to draw it in one panel only."""

    label: str
    mode: str
    processes: list[int]
    samples_per_s: list[float] | None = None
    efficiency: list[float] | None = None


def matplotlib_missing() -> str | None:
    """Why no PNG can be drawn here, or None when matplotlib imports."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        return f"matplotlib is not installed ({error}); `{install_hint('plot')}` to get scaling.png"
    return None


def title(rows: Sequence[ScalingRow], settings: dict[str, Any]) -> str:
    """Model, strategy, precision, device and each N's threads, for the figure's title.

    >>> from trainmesh.scaling.analysis import Measurement, scaling_rows
    >>> rows = scaling_rows("strong", [Measurement(1, 8, [0.01], [0.01], threads=2), Measurement(2, 4, [0.01], [0.01], threads=1)])
    >>> title(rows, {"model": "a.b:Net", "strategy": "ddp", "precision": "32-true", "device": "CPU, 2 physical cores"})
    'Net · ddp · 32-true · CPU, 2 physical cores · threads per process: N=1: 2, N=2: 1'
    """
    model = str(settings.get("model", "model")).rpartition(":")[2].rpartition(".")[2]
    threads = {row.processes: row.threads for row in rows if row.threads is not None}
    parts = [model, settings.get("strategy"), settings.get("precision"), settings.get("device")]
    text = " · ".join(str(part) for part in parts if part)
    if threads:
        text += " · threads per process: " + ", ".join(f"N={n}: {t}" for n, t in sorted(threads.items()))
    return text


def write_png(
    path: Path, rows: Sequence[ScalingRow], settings: dict[str, Any], extra_series: Sequence[PlotSeries] = ()
) -> None:
    """Draw ``rows`` (and ``extra_series``) into ``path``; matplotlib must be importable (see
    :func:`matplotlib_missing`)."""
    import matplotlib.pyplot as plt

    figure = build_figure(rows, settings, extra_series)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def build_figure(rows: Sequence[ScalingRow], settings: dict[str, Any], extra_series: Sequence[PlotSeries] = ()) -> Any:
    """The figure :func:`write_png` saves: two panels, throughput and efficiency against N."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    figure, (throughput_axes, efficiency_axes) = plt.subplots(1, 2, figsize=(12, 6.4))
    for mode in sorted({row.mode for row in rows}):
        mine = sorted((row for row in rows if row.mode == mode), key=lambda row: row.processes)
        _draw_mode(throughput_axes, efficiency_axes, mode, mine)
    for series in extra_series:
        colour = MODE_COLOURS.get(series.mode, REFERENCE_COLOUR)
        if series.samples_per_s is not None:
            throughput_axes.plot(series.processes, series.samples_per_s, "--", color=colour, label=series.label)
        if series.efficiency is not None:
            efficiency_axes.plot(series.processes, series.efficiency, "--", color=colour, label=series.label)
    _references(efficiency_axes, rows)
    ns = {row.processes for row in rows} | {n for series in extra_series for n in series.processes}
    hardware = settings.get("hardware_count")
    for axes in (throughput_axes, efficiency_axes):
        if hardware:
            what = settings.get("hardware_what", "cores")
            axes.axvline(hardware, color=REFERENCE_COLOUR, linestyle="-.", label=f"{hardware} {what} here")
            ns.add(int(hardware))
        _log2_axis(axes, sorted(ns))
        axes.grid(alpha=0.3)
        _legend_below(axes)
    throughput_axes.set_yscale("log")
    throughput_axes.set(ylabel="throughput (samples/s, min-max over windows)", title="Throughput")
    efficiency_axes.set(ylabel="parallel efficiency (min-max over windows)", title="Efficiency")
    figure.suptitle(title(rows, settings), fontsize="medium")
    figure.tight_layout()
    return figure


def _draw_mode(throughput_axes: Any, efficiency_axes: Any, mode: str, rows: list[ScalingRow]) -> None:
    colour = MODE_COLOURS.get(mode, REFERENCE_COLOUR)
    ns = [row.processes for row in rows]
    throughput = [row.samples_per_s for row in rows]
    bars = [
        [row.samples_per_s - row.samples_per_s_min for row in rows],
        [row.samples_per_s_max - row.samples_per_s for row in rows],
    ]
    throughput_axes.errorbar(ns, throughput, yerr=bars, fmt="o-", color=colour, capsize=4, label=f"{mode}: measured")
    # Ideal: the smallest N's throughput times N / N_smallest.
    ideal = [rows[0].samples_per_s * n / ns[0] for n in ns]
    throughput_axes.plot(ns, ideal, ":", color=colour, label=f"{mode}: ideal (linear)")
    efficiency = [_on_scale(row.efficiency) for row in rows]
    bars = [
        [max(0.0, value - _on_scale(row.efficiency_min)) for row, value in zip(rows, efficiency)],
        [_on_scale(row.efficiency_max) - value for row, value in zip(rows, efficiency)],
    ]
    efficiency_axes.errorbar(ns, efficiency, yerr=bars, fmt="o-", color=colour, capsize=4, label=f"{mode}: measured")
    flagged = [row for row in rows if row.superlinear]
    if flagged:
        for axes, values in (
            (throughput_axes, [row.samples_per_s for row in flagged]),
            (efficiency_axes, [_on_scale(row.efficiency) for row in flagged]),
        ):
            axes.scatter(
                [row.processes for row in flagged],
                values,
                s=160,
                facecolors="none",
                edgecolors=FLAG_COLOUR,
                linewidths=2,
                zorder=5,
                label="superlinear (flagged, not counted)",
            )
    for row in rows:
        if row.efficiency > EFFICIENCY_TOP:  # drawn at the top edge: its value is written beside it
            efficiency_axes.annotate(
                f"{mode}: {row.efficiency:.2f} (off scale)",
                (row.processes, _on_scale(row.efficiency)),
                textcoords="offset points",
                xytext=(-10, -16 if mode == "strong" else -30),
                ha="right",
                color=colour,
                fontsize="small",
            )


def _references(efficiency_axes: Any, rows: Sequence[ScalingRow]) -> None:
    efficiency_axes.axhline(1.0, linestyle=":", color="black", label="ideal (1.0)")
    efficiency_axes.axhline(
        PAYS_EFFICIENCY, linestyle="--", color=REFERENCE_COLOUR, label=f"pays threshold ({PAYS_EFFICIENCY})"
    )
    top = min(EFFICIENCY_TOP, max([1.2] + [row.efficiency_max * 1.1 for row in rows]))
    efficiency_axes.axhspan(
        SUPERLINEAR_EFFICIENCY, top, color=FLAG_COLOUR, alpha=0.08, label=f"superlinear (> {SUPERLINEAR_EFFICIENCY})"
    )
    efficiency_axes.set_ylim(0, top)


def _on_scale(efficiency: float) -> float:
    """Where an efficiency is drawn: above the panel's top, just under it."""
    return min(efficiency, EFFICIENCY_TOP * 0.97)


def _legend_below(axes: Any) -> None:
    """One entry per label (both modes' flags share one), below the panel so it hides no point."""
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axes.legend(
        unique.values(), unique.keys(), fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2
    )


def _log2_axis(axes: Any, ns: list[int]) -> None:
    """N on a log2 scale, each N labelled as itself (not 2^k), no minor ticks."""
    from matplotlib.ticker import NullLocator

    axes.set_xscale("log", base=2)
    axes.set_xlim(min(ns) / 1.3, max(ns) * 1.3)  # room for the bars and the core marker at the ends
    axes.set_xticks(ns)
    axes.set_xticklabels([str(n) for n in ns])
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_xlabel("processes N (log2)")
