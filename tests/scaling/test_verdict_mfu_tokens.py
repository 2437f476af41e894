"""MFU, tokens/s, the verdict and the noise flag, from recorded timings (no processes)."""

import re

import pytest

from trainmesh.scaling.analysis import Measurement, scaling_rows, verdict
from trainmesh.scaling.report import format_table


def _strong(*steps: float, spreads: dict[int, list[float]] | None = None) -> list:
    """Strong-scaling rows at N = 1, 2, 4, ... with a global batch of 64 and the given median steps."""
    runs = []
    for i, step in enumerate(steps):
        n = 2**i
        runs.append(Measurement(n, 64 // n, (spreads or {}).get(n, [step]), [step]))
    return scaling_rows("strong", runs)


def test_mfu_and_tokens_per_s_from_counted_flops_tokens_and_peak() -> None:
    runs = [
        Measurement(
            1, 8, [0.010], [0.010], flops_per_rank_step=2_000_000, tokens_per_rank_step=8 * 128, peak_flops=1e9
        ),
        Measurement(
            2, 8, [0.020], [0.015], flops_per_rank_step=2_000_000, tokens_per_rank_step=8 * 128, peak_flops=1e9
        ),
    ]
    one, two = scaling_rows("weak", runs)
    assert one.mfu == pytest.approx(2e6 / 0.010 / 1e9)  # 0.2
    assert two.mfu == pytest.approx(2e6 / 0.020 / 1e9)  # 0.1: per device, each rank does the same step
    assert one.tokens_per_s == pytest.approx(1024 / 0.010)
    assert two.tokens_per_s == pytest.approx(2 * 1024 / 0.020)  # both ranks' tokens
    table = format_table("weak", [one, two])
    assert "20.0%" in table and "10.0%" in table and "102400" in table


def test_no_peak_or_no_tokens_shows_a_dash() -> None:
    row = scaling_rows("strong", [Measurement(1, 8, [0.01], [0.01], flops_per_rank_step=1000)])[0]
    assert (row.mfu, row.tokens_per_s) == (None, None)
    header, cells = format_table("strong", [row]).splitlines()[1:3]
    columns = dict(zip(re.split(r"\s{2,}", header.strip()), cells.split()))
    assert columns["MFU"] == "-" and columns["tokens/s"] == "-"


def test_verdict_stay_at_one_when_the_second_n_loses() -> None:
    rows = _strong(0.010, 0.0145)  # speedup 0.69, efficiency 0.34
    assert verdict(rows) == (
        "N=2 runs at 0.34 efficiency (windows 0.34-0.34): 2 processes finish 0.69x as fast as 1; "
        "on this machine stay at N=1."
    )


def test_verdict_names_where_scaling_stops_paying_and_what_the_next_n_adds() -> None:
    # N=2 at 0.9, N=4 at 0.8, N=8 at 0.44 (throughput 3.2 -> 3.52 times N=1's: +10%).
    rows = _strong(0.010, 0.010 / 1.8, 0.010 / 3.2, 0.010 / 3.52)
    assert verdict(rows) == (
        "scaling pays up to N=4 (efficiency 0.80, windows 0.80-0.80; threshold 0.7); "
        "N=8 adds 10% throughput at 0.44 efficiency."
    )
    assert verdict(_strong(0.010, 0.010 / 1.9)).startswith("scaling pays up to N=2 (efficiency 0.95, windows")


def test_weak_verdict_speaks_of_samples_per_second() -> None:
    rows = scaling_rows("weak", [Measurement(1, 32, [0.010], [0.010]), Measurement(2, 32, [0.025], [0.01])])
    assert "2 processes process 0.80x the samples/s of 1; on this machine stay at N=1." in verdict(rows)


def test_noisy_flag_on_superlinear_efficiency_and_on_a_spread_beyond_the_bound() -> None:
    assert [row.noisy for row in _strong(0.010, 0.0045)] == [False, True]  # efficiency 1.11
    # N=2 windows at 8, 6 and 20 ms: 8000 samples/s median, 3200-10667 spread = 93% of it.
    assert [row.noisy for row in _strong(0.010, 0.008, spreads={2: [0.008, 0.006, 0.020]})] == [False, True]
    # 7, 8 and 9 ms: 7111-9143 samples/s, 25% of the median: beyond the 20% bound as well.
    assert [row.noisy for row in _strong(0.010, 0.008, spreads={2: [0.008, 0.007, 0.009]})] == [False, True]
    assert [row.noisy for row in _strong(0.010, 0.008, spreads={2: [0.008, 0.0075, 0.0085]})] == [False, False]
