"""The advice `trainmesh scale` gives, from recorded timings (no processes): superlinear rows are
flagged and never pay, "pays" stops where throughput stops rising, the spread is stated, and the
verdict is withheld when windows disagree. Includes the two sweeps issue 28 reports as wrong."""

import re

import pytest

from trainmesh.scaling.analysis import Measurement, scaling_rows, verdict
from trainmesh.scaling.load import MachineLoad
from trainmesh.scaling.report import format_table, progress_line


def _strong(windows: dict[int, list[float]], global_batch: int = 64) -> list:
    return scaling_rows("strong", [Measurement(n, global_batch // n, w, w) for n, w in windows.items()])


def test_issue_case_282_ms_at_one_against_2_55_ms_at_two_is_flagged_and_never_pays() -> None:
    # Recorded on a busy 2-core machine: N=1 ran 2 spin-waiting threads (282 ms), N=2 one each (2.55 ms).
    windows = {1: [0.282, 0.279, 0.285], 2: [0.00255, 0.00254, 0.00256]}
    rows = scaling_rows("strong", [Measurement(n, 64 // n, w, w, threads=3 - n) for n, w in windows.items()])
    two = rows[1]
    assert two.efficiency == pytest.approx(0.282 / 0.00255 / 2) and two.superlinear and two.noisy
    text = verdict(rows)
    # The old rule (every efficiency >= 0.7) said "scaling pays up to N=2".
    assert "scaling pays" not in text
    assert text.startswith("N=2 measured 55.29 efficiency, superlinear: not counted as paying, so no N past 1")
    assert "Flagged superlinear (efficiency above 1.05): N=2 (55.29)" in text
    assert text.endswith(
        "The threads per process differed (2 at N=1, 1 at N=2): a process with more threads than the free "
        "cores spin-waits, so rerun with --threads 1 to give every N the same threads."
    )
    table = format_table("strong", rows)
    assert " 55.29* " in table and "* superlinear: efficiency above 1.05" in table
    assert "55.29 (superlinear: flagged, not counted as paying)" in progress_line(two)


def test_issue_case_weak_fsdp_sweep_falling_from_3694_to_831_samples_per_s_pays_nowhere() -> None:
    # Weak fsdp sweep, 32 samples per rank: samples/s 113 (N=1, 282 ms), 3694, 2100, 831 (N=8).
    per_rank = 32
    steps = {1: 0.282, 2: 2 * per_rank / 3694, 4: 4 * per_rank / 2100, 8: 8 * per_rank / 831}
    rows = scaling_rows("weak", [Measurement(n, per_rank, [s], [s]) for n, s in steps.items()])
    assert [round(row.samples_per_s) for row in rows] == [113, 3694, 2100, 831]
    # Every efficiency is >= 0.7, so the old rule said "scaling pays up to N=8".
    assert min(row.efficiency for row in rows) > 0.7
    assert [row.superlinear for row in rows] == [False, True, True, False]
    text = verdict(rows)
    assert "scaling pays" not in text
    assert text.startswith("N=2 measured 16.28 efficiency, superlinear")
    assert "Throughput peaks at N=2 (3694 samples/s) and is 831 at N=8." in text
    assert "N=2 (16.28), N=4 (4.63)" in text


def test_pays_stops_where_throughput_stops_rising_even_at_high_efficiency() -> None:
    # Throughput (in units of N=1's): 1.0, 1.96, 4.0, 3.9 at N=1, 2, 4, 5: N=5 runs at 0.78 efficiency
    # (above the 0.7 threshold) but adds nothing.
    rows = _strong({1: [0.010], 2: [0.010 / 1.96], 4: [0.010 / 4.0], 5: [0.010 / 3.9]}, global_batch=320)
    assert rows[3].efficiency == pytest.approx(0.78)
    assert verdict(rows) == (
        "scaling pays up to N=4 (efficiency 1.00, windows 1.00-1.00; threshold 0.7); N=5 adds no throughput "
        "(124800 samples/s against 128000). Throughput peaks at N=4 (128000 samples/s) and is 124800 at N=5."
    )


def test_pays_states_the_windows_spread_of_efficiency() -> None:
    rows = _strong({1: [0.010, 0.0101, 0.0099], 2: [0.0053, 0.0054, 0.0052]})
    two = rows[1]
    assert (two.efficiency_min, two.efficiency_max) == pytest.approx((64 / 0.0054 / 12800, 64 / 0.0052 / 12800))
    assert verdict(rows) == (
        "scaling pays up to N=2 (efficiency 0.94, windows 0.93-0.96; threshold 0.7), the most measured: "
        "more processes may pay too."
    )


def test_slightly_superlinear_is_flagged_and_not_counted_after_a_paying_n() -> None:
    # N=2 at 0.95, N=4 at 1.10: flagged; pays stops at N=2.
    rows = _strong({1: [0.010], 2: [0.010 / 1.9], 4: [0.010 / 4.4]})
    assert [row.superlinear for row in rows] == [False, False, True]
    assert verdict(rows) == (
        "scaling pays up to N=2 (efficiency 0.95, windows 0.95-0.95; threshold 0.7); N=4 measured 1.10 "
        "efficiency, superlinear: not counted. Flagged superlinear (efficiency above 1.05): N=4 (1.10); faster "
        "than linear here means noise, contention slowing the smaller N, or cache effects."
    )
    assert not _strong({1: [0.010], 2: [0.010 / 2.1]})[1].superlinear  # 1.05 itself is not flagged


def test_verdict_withheld_with_the_reason_when_windows_disagree_beyond_the_bound() -> None:
    # N=2 windows at 8, 6 and 20 ms: 8000 samples/s median, 3200-10667 = 93% of it.
    rows = _strong({1: [0.010, 0.010, 0.010], 2: [0.008, 0.006, 0.020]})
    assert rows[1].spread == pytest.approx((64 / 0.006 - 64 / 0.020) / 8000) and rows[1].noisy
    assert verdict(rows) == (
        "verdict withheld: the timed windows disagree beyond the 20% bound at N=2 (93%: 3200-10667 samples/s); "
        "the machine's load changed while measuring: rerun on a quieter machine or with more --windows/--steps."
    )
    # 14% apart (10667-12308 samples/s) is within the bound: a verdict is given.
    within = _strong({1: [0.010], 2: [0.0055, 0.0052, 0.0060]})
    assert within[1].spread == pytest.approx(0.141, abs=1e-3)
    assert verdict(within).startswith("scaling pays up to N=2 (efficiency 0.91, windows 0.83-0.96")


def test_stay_at_one_states_the_spread_and_a_busy_machine_is_said() -> None:
    busy = MachineLoad(cpus=2, loadavg_before=3.1, others_before=1.9, loadavg_during=3.5, others_during=1.2)
    runs = [Measurement(1, 64, [0.010], [0.010], threads=2, load=busy), Measurement(2, 32, [0.0145], [0.01], threads=1)]
    rows = scaling_rows("strong", runs)
    assert (rows[0].busy, rows[1].busy, rows[0].others_busy_during, rows[0].threads) == (True, False, 1.2, 2)
    assert verdict(rows) == (
        "N=2 runs at 0.34 efficiency (windows 0.34-0.34): 2 processes finish 0.69x as fast as 1; on this machine "
        "stay at N=1. Caution: other processes kept up to 1.90 of 2 CPUs busy around N=1: these figures measure "
        "sharing the machine, not scaling alone."
    )
    header, first = format_table("strong", rows).splitlines()[1:3]
    cells = dict(zip(re.split(r"\s{2,}", header.strip()), first.split()))
    assert (cells["threads"], cells["others busy"]) == ("2", "1.20/2")
