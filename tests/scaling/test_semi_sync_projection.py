"""``trainmesh project --sync_every``: ddp against replica groups meeting every H steps (LocalSGD,
DiLoCo) on a link; the arithmetic checked by hand, the crossovers against the rows, the command's table."""

import doctest

import pytest

from trainmesh.scaling import semi_sync_projection as semi
from trainmesh.scaling.project_command import run_project_command
from trainmesh.scaling.projection import LINKS, facts_from_count

FACTS = facts_from_count(10**8)  # 4e8 bytes in fp32: 16 of DDP's 25 MiB buckets


def test_step_times_on_the_cross_region_link_by_hand():
    """N=2, 10 Gb/s (1.25e9 B/s), 50 ms per latency step, 100 ms of compute. ddp: 16 buckets, each an
    all-reduce of 2 latency steps (ring and tree alike at N=2): 16 x 2 x 50 ms = 1.6 s, plus 2(N-1)/N x
    4e8 B / 1.25e9 B/s = 0.32 s. A sync: one all-reduce, 2 x 50 ms + 0.32 s = 0.42 s, spread over H."""
    link = LINKS["cross-region"]
    assert (link.bandwidth, link.latency) == (1.25e9, 50e-3)
    rows = semi.semi_sync_rows(FACTS, compute_s=0.1, link=link, groups=2, sync_every=(1, 10, 100))
    assert [(r.mode, r.sync_every) for r in rows] == [("ddp", 1)] + [("local_sgd/diloco", h) for h in (1, 10, 100)]
    expected_comm_ms = [1920.0, 420.0, 42.0, 4.2]
    assert [r.comm_ms for r in rows] == pytest.approx(expected_comm_ms)
    assert [r.step_ms for r in rows] == pytest.approx([100 + c for c in expected_comm_ms])
    assert [r.efficiency for r in rows] == pytest.approx([100 / (100 + c) for c in expected_comm_ms])
    assert [r.mb_sent_per_step for r in rows] == pytest.approx([400.0, 400.0, 40.0, 4.0])  # 2(N-1)/N = 1 at N=2


def test_ddp_overlap_hides_its_communication_but_not_a_sync_between_steps():
    link = LINKS["100gbe"]  # 4e8 B: 32 ms of bandwidth at N=2, 16 x 2 x 20 us of latency
    rows = semi.semi_sync_rows(FACTS, compute_s=0.1, link=link, groups=2, sync_every=(1,), overlap=1.0)
    ddp, every_step_sync = rows
    assert ddp.comm_ms == pytest.approx(32.64) and ddp.step_ms == pytest.approx(100.0)
    assert every_step_sync.step_ms == pytest.approx(100 + 32.04)


@pytest.mark.parametrize("link", ["100gbe", "10gbe", "cross-region"])
@pytest.mark.parametrize("groups", [2, 8])
def test_the_crossovers_are_where_the_rows_cross(link, groups):
    common = dict(compute_s=0.15, link=LINKS[link], groups=groups)
    found = semi.crossover(FACTS, **common)
    h = found.reaches_target_from
    rows = semi.semi_sync_rows(FACTS, sync_every=(h - 1, h) if h > 1 else (h,), **common)
    assert rows[-1].efficiency >= 0.9 and (h == 1 or rows[-2].efficiency < 0.9)
    assert found.ddp_efficiency == pytest.approx(rows[0].efficiency)
    b = found.beats_ddp_from
    beats = semi.semi_sync_rows(FACTS, sync_every=(b - 1, b) if b > 1 else (b,), **common)
    assert beats[-1].step_ms < beats[0].step_ms and (b == 1 or beats[-2].step_ms >= beats[0].step_ms)


def test_nothing_beats_ddp_when_its_communication_is_hidden_entirely():
    found = semi.crossover(FACTS, compute_s=10.0, link=LINKS["nvlink"], groups=2, overlap=1.0)
    assert found.beats_ddp_from is None and found.ddp_efficiency == 1.0


def test_the_module_examples_hold():
    assert doctest.testmod(semi).failed == 0


def test_project_prints_each_mode_per_link_and_the_crossovers(capsys):
    args = ["--parameters", "1e8", "--compute_ms", "100", "--strategy", "ddp", "--projected_processes", "8"]
    assert (
        run_project_command([*args, "--link", "cross-region", "--sync_every", "1,10,100", "--replica_groups", "2"]) == 0
    )
    out = capsys.readouterr().out
    block = out[out.index("semi-synchronous replica groups on cross-region") :].splitlines()
    assert block[2].split() == ["ddp", "1", "400", "2020", "/", "0.05"]
    assert block[5].split() == ["local_sgd/diloco", "100", "4", "104.2", "/", "0.96"]
    assert "N=2: ddp's efficiency 0.05; LocalSGD/DiLoCo's step is shorter than ddp's from H >= 1; its efficiency " \
        "reaches 0.9 from H >= 38" in out  # fmt: skip
    with pytest.raises(ValueError, match="--sync_every '0,10': each must be >= 1"):
        run_project_command([*args, "--sync_every", "0,10"])
