"""The scaling table's arithmetic and the files it writes, from recorded timings (no processes)."""

import csv
import json
import math

import pytest

from trainmesh.scaling.analysis import Measurement, karp_flatt, scaling_rows
from trainmesh.scaling.report import format_table, write_reports

# Recorded: N=1 steps 10 ms at 64 samples; N=2 steps 8 ms at 32 per rank, 6 ms without sync.
RUNS = [
    Measurement(
        processes=2,
        per_rank_batch=32,
        step_s=[0.008, 0.010, 0.007],
        no_sync_step_s=[0.006, 0.006, 0.006],
        peak_memory_bytes=200 * 2**20,
    ),
    Measurement(
        processes=1,
        per_rank_batch=64,
        step_s=[0.010, 0.011, 0.009],
        no_sync_step_s=[0.010] * 3,
        peak_memory_bytes=100 * 2**20,
    ),
]


def test_strong_scaling_rows_speedup_efficiency_karp_flatt_comm_share_and_spread() -> None:
    base, two = scaling_rows("strong", RUNS)  # sorted by N whatever the input order
    assert (base.processes, base.speedup, base.efficiency, base.karp_flatt, base.comm_share) == (1, 1.0, 1.0, None, 0.0)
    assert base.samples_per_s == pytest.approx(64 / 0.010)
    assert two.samples_per_s == pytest.approx(64 / 0.008)  # median window
    assert two.speedup == pytest.approx(1.25)
    assert two.efficiency == pytest.approx(0.625)
    assert two.karp_flatt == pytest.approx((1 / 1.25 - 1 / 2) / (1 - 1 / 2))  # 0.6
    assert two.comm_share == pytest.approx(0.25)  # (8 - 6) / 8
    assert (two.samples_per_s_min, two.samples_per_s_max) == pytest.approx((64 / 0.010, 64 / 0.007))
    assert (two.global_batch, two.peak_memory_mb) == (64, 200.0)


def test_weak_scaling_efficiency_is_base_step_over_step() -> None:
    runs = [Measurement(1, 32, [0.010], [0.010]), Measurement(4, 32, [0.016], [0.012])]
    four = scaling_rows("weak", runs)[1]
    assert four.efficiency == pytest.approx(0.010 / 0.016)
    assert four.speedup == pytest.approx(4 * 0.010 / 0.016)
    assert karp_flatt(4.0, 4) == 0.0 and math.isclose(karp_flatt(1.0, 4), 1.0)


def test_reports_write_csv_json_png_and_table(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    rows = scaling_rows("strong", RUNS) + scaling_rows("weak", RUNS)
    written = write_reports(tmp_path, rows, {"strategy": "ddp"})
    assert [p.name for p in written] == ["scaling.csv", "scaling.json", "scaling.png"]
    with open(tmp_path / "scaling.csv") as file:
        table = list(csv.DictReader(file))
    assert [(r["mode"], r["processes"], float(r["speedup"])) for r in table] == [
        ("strong", "1", 1.0),
        ("strong", "2", 1.25),
        ("weak", "1", 1.0),
        ("weak", "2", 1.25),
    ]
    saved = json.loads((tmp_path / "scaling.json").read_text())
    assert saved["settings"] == {"strategy": "ddp"} and saved["rows"][1]["karp_flatt"] == pytest.approx(0.6)
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = format_table("strong", rows[:2])
    assert "Karp-Flatt e" in text and "0.600" in text and "25.0" in text
