"""The projection's formulas against hand-computed cases: ring and tree collectives, each
strategy's collectives, latency, overlap, weak and strong rows, the verdict and the calibration."""

import math
import re

import pytest

from trainmesh.scaling.analysis import Measurement
from trainmesh.scaling.projection import (
    LINKS,
    Collective,
    Link,
    ModelFacts,
    calibrate,
    facts_from_count,
    format_calibration,
    format_projection,
    parse_bandwidth,
    parse_latency,
    project,
    projected_verdict,
    resolve_link,
    step_collectives,
    step_seconds,
)

LINK = Link("test", bandwidth=1e9, latency=1e-6)  # 1 GB/s, 1 us a step
FACTS = ModelFacts(parameters=1_000_000, parameter_bytes=4_000_000, gathered_bytes=2_000_000, tensors=10, units=4)


def test_ring_all_reduce_sends_2_n_minus_1_over_n_of_the_bytes_and_pays_2_n_minus_1_latencies():
    all_reduce = Collective("all_reduce", 1e6, ranks=4, calls=1)
    assert all_reduce.bytes_sent() == pytest.approx(2 * 3 / 4 * 1e6)  # 1.5 MB
    assert all_reduce.latency_steps("ring") == 6
    # 6 x 1 us + 1.5 MB / 1 GB/s = 1.506 ms
    assert all_reduce.seconds(LINK, "ring") == pytest.approx(6e-6 + 1.5e-3)


def test_all_gather_and_reduce_scatter_send_n_minus_1_over_n_of_the_bytes():
    for kind in ("all_gather", "reduce_scatter"):
        collective = Collective(kind, 8e6, ranks=8, calls=3)
        assert collective.bytes_sent() == pytest.approx(7e6)
        assert collective.latency_steps("ring") == 7
        assert collective.seconds(LINK, "ring") == pytest.approx(3 * 7 * 1e-6 + 7e-3)


def test_tree_and_nccl_latency_steps():
    all_reduce, all_gather = Collective("all_reduce", 1.0, 1024, 1), Collective("all_gather", 1.0, 1024, 1)
    assert all_reduce.latency_steps("tree") == 2 * 10 and all_gather.latency_steps("tree") == 10
    # NCCL picks the tree for an all-reduce where it has fewer steps; it has no tree for all-gathers.
    assert all_reduce.latency_steps("nccl") == 20 and all_gather.latency_steps("nccl") == 1023
    assert Collective("all_reduce", 1.0, 2, 1).latency_steps("nccl") == 2  # ring 2(2-1) = tree 2x1
    # One rank: nothing sent, nothing waited for.
    alone = Collective("all_reduce", 1e9, 1, 5)
    assert alone.bytes_sent() == 0 and alone.seconds(LINK) == 0


def test_each_strategys_collectives():
    ddp = step_collectives("ddp", 4, FACTS)
    assert [(c.kind, c.size_bytes, c.ranks, c.calls) for c in ddp] == [("all_reduce", 4_000_000, 4, 1)]
    big = ModelFacts(25_000_000, 100 * 2**20, 100 * 2**20, 10, 4)
    assert step_collectives("ddp", 4, big)[0].calls == 4  # 100 MiB in DDP's 25 MiB buckets
    zero1 = step_collectives("zero1", 4, FACTS)
    assert [(c.kind, c.size_bytes, c.calls) for c in zero1] == [
        ("all_reduce", 4_000_000, 1),
        ("all_gather", 4_000_000, 10),  # one broadcast per parameter tensor
    ]
    fsdp = step_collectives("fsdp", 8, FACTS)
    assert [(c.kind, c.size_bytes, c.calls) for c in fsdp] == [
        ("all_gather", 2_000_000, 4),  # forward, in the compute dtype
        ("all_gather", 2_000_000, 4),  # again for backward
        ("reduce_scatter", 4_000_000, 4),
    ]
    # fsdp: (N-1)/N x (2 P_c + G) per rank = 7/8 x 8 MB.
    assert sum(c.bytes_sent() for c in fsdp) == pytest.approx(7 / 8 * 8e6)
    sharded = step_collectives("sharded", 8, FACTS)
    assert [c.kind for c in sharded] == ["all_gather", "reduce_scatter"]
    hsdp = step_collectives("hsdp", 32, FACTS, shard_size=8)
    assert [(c.kind, c.ranks, c.size_bytes) for c in hsdp][-1] == ("all_reduce", 4, 4_000_000 / 8)
    assert all(c.ranks == 8 for c in hsdp[:-1])
    with pytest.raises(ValueError, match="no communication model.*activations"):
        step_collectives("tp", 8, FACTS)


def test_overlap_hides_at_most_the_compute():
    assert step_seconds(0.010, 0.004, 0.0) == pytest.approx(0.014)
    assert step_seconds(0.010, 0.004, 0.5) == pytest.approx(0.012)
    assert step_seconds(0.010, 0.004, 1.0) == pytest.approx(0.010)
    assert step_seconds(0.002, 0.010, 1.0) == pytest.approx(0.010)  # 2 ms of compute hides 2 ms
    with pytest.raises(ValueError, match="0..1"):
        step_seconds(0.01, 0.01, 1.5)


def test_a_weak_row_by_hand():
    # 1e8 fp32 parameters under ddp at N=8 on 50 GB/s, 5 us: 7e8 bytes sent = 14 ms; 16 buckets
    # (4e8 / 25 MiB = 15.3) x 2 x min(7, 3) steps x 5 us = 0.48 ms; compute 100 ms.
    facts = facts_from_count(100_000_000, "32-true")
    link = Link("ib", 50e9, 5e-6)
    (row,) = project("ddp", facts, compute_s=0.1, batch=16, link=link, processes=(8,))
    assert row.comm_ms == pytest.approx(14.48)
    assert row.step_ms == pytest.approx(114.48)
    assert row.mb_sent_per_rank == pytest.approx(700)
    assert row.efficiency == pytest.approx(0.1 / 0.11448)
    assert row.samples_per_s == pytest.approx(16 * 8 / 0.11448)
    (hidden,) = project("ddp", facts, compute_s=0.1, batch=16, link=link, overlap=1.0, processes=(8,))
    assert hidden.step_ms == pytest.approx(100) and hidden.efficiency == pytest.approx(1.0)


def test_strong_rows_divide_the_compute_and_mark_ranks_without_a_whole_sample():
    rows = project("ddp", FACTS, compute_s=0.064, batch=64, link=LINK, mode="strong", processes=(8, 128))
    assert rows[0].per_rank_batch == 8 and rows[0].compute_ms == pytest.approx(8.0) and rows[0].feasible
    # 1 GB/s: 2 x 7/8 x 4 MB = 7 ms, 2 x 3 steps x 1 us (nccl: the tree's log2 8 = 3).
    assert rows[0].step_ms == pytest.approx(8 + 7 + 0.006)
    assert rows[0].speedup == pytest.approx(64 / (8 + 7.006))
    assert not rows[1].feasible  # 64 samples over 128 ranks
    assert re.search(r"^ *128 +0\.5( +-){7}$", format_projection("t", rows), re.MULTILINE)


def _rows(efficiencies, throughputs):
    from trainmesh.scaling.projection import ProjectedRow

    return [
        ProjectedRow(8 * 2**i, 8, 1.0, 1.0, 2.0, 1.0, x, e * 8 * 2**i, e)
        for i, (e, x) in enumerate(zip(efficiencies, throughputs))
    ]


def test_the_projected_verdict():
    assert projected_verdict(_rows([0.9, 0.8, 0.6], [100, 180, 250])).startswith("pays up to N=16 (efficiency 0.80")
    assert projected_verdict(_rows([0.5, 0.4], [100, 160])).startswith("does not pay from N=8 (efficiency 0.50")
    assert projected_verdict(_rows([0.9, 0.85], [100, 170])).startswith("pays up to N=16, the largest projected")
    # Efficient but no faster: scaling stops paying where throughput stops rising.
    text = projected_verdict(_rows([0.9, 0.8, 0.75], [100, 180, 170]))
    assert text.startswith("pays up to N=16") and text.endswith("throughput peaks at N=16 (180 samples/s).")


def test_links_parse_and_presets():
    assert parse_bandwidth("400Gb/s") == 50e9 and parse_bandwidth("50GB/s") == 50e9
    assert parse_bandwidth("100 Gbit/s") == 12.5e9 and parse_bandwidth("1.5TB/s") == 1.5e12
    assert parse_latency("5us") == 5e-6 and parse_latency("2 ms") == 2e-3 and parse_latency("800ns") == 8e-7
    assert resolve_link("infiniband-ndr") is LINKS["infiniband-ndr"]
    assert resolve_link("NVLink", "1us").latency == 1e-6 and resolve_link("nvlink").bandwidth == 450e9
    assert resolve_link("400Gb/s", "5us") == Link("400Gb/s", 50e9, 5e-6)
    with pytest.raises(ValueError, match="needs --latency"):
        resolve_link("400Gb/s")
    with pytest.raises(ValueError, match="not understood"):
        parse_bandwidth("fast")


def test_facts_from_a_count():
    facts = facts_from_count(117_000_000, "bf16-mixed", layers=12)
    # Mixed precision keeps fp32 weights (4 bytes) and FSDP gathers them in bf16 (2 bytes).
    assert (facts.parameter_bytes, facts.gathered_bytes) == (468_000_000, 234_000_000)
    assert (facts.tensors, facts.units) == (12 * 12 + 4, 15)
    assert facts_from_count(10, "bf16-true").parameter_bytes == 20


def test_calibration_fits_the_bandwidth_at_n2_and_models_every_measured_n():
    facts = ModelFacts(1_000_000, 4_000_000, 4_000_000, 4, 3)
    runs = [
        Measurement(1, 64, [0.010, 0.011, 0.009], [0.010, 0.010, 0.010]),
        Measurement(2, 64, [0.014], [0.011]),  # 3 ms of communication
        Measurement(4, 64, [0.016], [0.011]),
    ]
    calibration = calibrate("ddp", facts, runs)
    # N=2 sends 2 x 1/2 x 4 MB = 4 MB in 3 ms: 1.333 GB/s.
    assert calibration.link is not None and calibration.link.bandwidth == pytest.approx(4e6 / 0.003)
    assert calibration.compute_per_sample_s == pytest.approx(0.010 / 64)
    one, two, four = calibration.rows
    assert (one.measured_ms, one.modelled_ms) == (pytest.approx(10), pytest.approx(10))
    assert (two.measured_ms, two.modelled_ms) == (pytest.approx(14), pytest.approx(13))
    # N=4 sends 2 x 3/4 x 4 MB = 6 MB: 4.5 ms on the fitted link.
    assert four.modelled_comm_ms == pytest.approx(4.5) and four.measured_comm_ms == pytest.approx(5)
    table = format_calibration("weak ddp", calibration)
    assert "link fitted at N=2: 4 MB sent per rank in 3 ms" in table
    assert table.splitlines()[3].split()[:4] == ["2", "14", "13", "1.08"]


def test_calibration_without_measurable_communication_says_so():
    facts = ModelFacts(10, 40, 40, 1, 1)
    calibration = calibrate("ddp", facts, [Measurement(1, 8, [0.01], [0.01]), Measurement(2, 8, [0.01], [0.012])])
    assert calibration.link is None and "nothing to fit" in calibration.note
    assert math.isclose(calibration.rows[1].modelled_ms, 10)


def test_calibration_warns_when_the_model_misses_a_measured_n():
    # The case: N=1 spin-waited with 2 threads (219 ms), N=2 ran 1.53 ms a step.
    facts = ModelFacts(26_122, 104_488, 104_488, 6, 4)
    runs = [Measurement(1, 32, [0.219], [0.219]), Measurement(2, 32, [0.00153], [0.00062])]
    table = format_calibration("weak ddp", calibrate("ddp", facts, runs))
    assert table.splitlines()[-1].startswith("warning: the model misses N=2 by 0.01x")
    fine = [Measurement(1, 32, [0.002], [0.002]), Measurement(2, 32, [0.0026], [0.0021])]
    assert "warning" not in format_calibration("weak ddp", calibrate("ddp", facts, fine))
