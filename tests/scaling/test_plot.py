"""scaling.png: log2 N axis, min-max bars, ideal lines, a title naming what was measured, a marker
at the machine's core count, one colour per mode; and one line saying why when no PNG is written."""

import sys

import pytest

from trainmesh.scaling.analysis import Measurement, scaling_rows
from trainmesh.scaling.plot import MODE_COLOURS, PlotSeries, build_figure, matplotlib_missing, title
from trainmesh.scaling.report import write_reports

RUNS = [
    Measurement(1, 64, [0.010, 0.011, 0.009], [0.010] * 3, threads=2),
    Measurement(2, 32, [0.006, 0.0065, 0.0058], [0.005] * 3, threads=1),
    Measurement(4, 16, [0.0020, 0.0021, 0.0019], [0.0018] * 3, threads=1),  # efficiency 1.25: superlinear
]
SETTINGS = {
    "model": "trainmesh.demo:DigitsClassifier",
    "strategy": "fsdp",
    "precision": "32-true",
    "device": "CPU, 2 physical cores",
    "hardware_count": 2,
    "hardware_what": "physical CPU cores",
}


def test_title_names_model_strategy_device_and_threads() -> None:
    rows = scaling_rows("strong", RUNS)
    assert title(rows, SETTINGS) == (
        "DigitsClassifier · fsdp · 32-true · CPU, 2 physical cores · threads per process: N=1: 2, N=2: 1, N=4: 1"
    )


def _colour(artist) -> tuple:
    from matplotlib.colors import to_rgba

    return to_rgba(artist.get_color())


def test_figure_log2_axis_bars_ideal_core_marker_flags_and_one_colour_per_mode() -> None:
    if matplotlib_missing():
        pytest.skip(f"the PNG path needs matplotlib: {matplotlib_missing()}")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    rows = scaling_rows("strong", RUNS) + scaling_rows("weak", RUNS)
    projected = [PlotSeries("strong: projected", "strong", [8, 16], samples_per_s=[30000.0, 40000.0])]
    figure = build_figure(rows, SETTINGS, projected)
    throughput, efficiency = figure.axes
    assert figure._suptitle.get_text() == title(rows, SETTINGS)
    for axes in (throughput, efficiency):
        assert axes.get_xscale() == "log" and axes.xaxis.get_transform().base == 2
        # Each measured and projected N labelled as itself.
        assert [t.get_text() for t in axes.get_xticklabels()] == ["1", "2", "4", "8", "16"]
        lines = {line.get_label(): line for line in axes.get_lines()}
        marker = lines["2 physical CPU cores here"]
        assert list(marker.get_xdata()) == [2, 2] and marker.get_linestyle() == "-."
        # Min-max bars: one errorbar container per mode, with a bar at each N.
        containers = {c.get_label(): c for c in axes.containers}
        assert set(containers) == {"strong: measured", "weak: measured"}
        assert all(len(c.lines[2][0].get_segments()) == 3 for c in containers.values())
        # One colour per mode: the measured line (and its ideal) in the mode's colour in both panels.
        for mode in ("strong", "weak"):
            assert _colour(containers[f"{mode}: measured"].lines[0]) == to_rgba(MODE_COLOURS[mode])
        flags = [c for c in axes.collections if c.get_label() == "superlinear (flagged, not counted)"]
        assert len(flags) == 2 and all(len(c.get_offsets()) == 1 for c in flags)  # N=4 in each mode
        legend = [text.get_text() for text in axes.get_legend().get_texts()]
        assert legend.count("superlinear (flagged, not counted)") == 1  # one entry, one meaning
    ideal = {line.get_label(): line for line in throughput.get_lines()}["strong: ideal (linear)"]
    assert ideal.get_linestyle() == ":" and _colour(ideal) == to_rgba(MODE_COLOURS["strong"])
    strong_base = rows[0].samples_per_s
    assert list(ideal.get_ydata()) == pytest.approx([strong_base, 2 * strong_base, 4 * strong_base])
    dashed = {line.get_label(): line for line in throughput.get_lines()}["strong: projected"]
    assert dashed.get_linestyle() == "--" and _colour(dashed) == to_rgba(MODE_COLOURS["strong"])
    references = {line.get_label() for line in efficiency.get_lines()}
    assert {"ideal (1.0)", "pays threshold (0.7)"} <= references
    plt.close(figure)


def test_reports_write_a_png_when_matplotlib_imports(tmp_path) -> None:
    if matplotlib_missing():
        pytest.skip(f"the PNG path needs matplotlib: {matplotlib_missing()}")
    said: list[str] = []
    written = write_reports(tmp_path, scaling_rows("strong", RUNS), SETTINGS, say=said.append)
    assert [p.name for p in written] == ["scaling.csv", "scaling.json", "scaling.png"] and said == []
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_one_line_says_no_png_was_written_and_why(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    said: list[str] = []
    written = write_reports(tmp_path, scaling_rows("strong", RUNS), SETTINGS, say=said.append)
    assert [p.name for p in written] == ["scaling.csv", "scaling.json"]
    assert not (tmp_path / "scaling.png").exists()
    assert len(said) == 1 and said[0].startswith("no scaling.png written: matplotlib is not installed")
    assert 'pip install "trainmesh[plot]"' in said[0]


def test_an_efficiency_far_above_linear_is_drawn_at_the_top_with_its_value_written() -> None:
    if matplotlib_missing():
        pytest.skip(f"the PNG path needs matplotlib: {matplotlib_missing()}")
    import matplotlib.pyplot as plt

    # The busy-machine sweep: 282 ms at N=1, 2.55 ms at N=2 (efficiency 55.29).
    rows = scaling_rows("strong", [Measurement(1, 64, [0.282], [0.282]), Measurement(2, 32, [0.00255], [0.002])])
    figure = build_figure(rows, SETTINGS)
    efficiency = figure.axes[1]
    assert efficiency.get_ylim() == (0, 1.6)  # the 0.7 and 1.0 lines stay readable
    assert [t.get_text() for t in efficiency.texts] == ["strong: 55.29 (off scale)"]
    plt.close(figure)
