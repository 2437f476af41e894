"""The machine's load around each N: /proc/stat arithmetic on written files, the busy rule, and a
real reading that sees this process's own CPU time as its own."""

import os
import sys

import pytest

from trainmesh.scaling.load import CpuTimes, MachineLoad, _busy_seconds, cpu_count, others_busy, read_cpu_times

# user nice system idle iowait irq softirq steal guest guest_nice, in clock ticks.
STAT = "cpu  300 10 90 500 20 5 5 0 40 0\ncpu0 150 5 45 250 10 3 2 0 20 0\ncpu1 150 5 45 250 10 2 3 0 20 0\nintr 1\n"


def test_busy_seconds_leave_out_idle_iowait_and_guest_and_cpus_are_counted(tmp_path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    # 300 + 10 + 90 + 5 + 5 + 0 busy ticks; guest (40) is already inside user.
    assert _busy_seconds(str(stat)) == pytest.approx(410 / os.sysconf("SC_CLK_TCK"))
    assert cpu_count(str(stat)) == 2
    assert _busy_seconds(str(tmp_path / "missing")) is None


def test_others_are_the_machines_busy_cpus_less_ours_never_below_zero() -> None:
    # Over 2 s: 3.8 CPU-seconds busy on the machine, 1.0 of them ours: others used 1.4 CPUs.
    assert others_busy(CpuTimes(0.0, 10.0, 5.0), CpuTimes(2.0, 13.8, 6.0)) == pytest.approx((1.4, 0.5))
    assert others_busy(CpuTimes(0.0, 10.0, 5.0), CpuTimes(1.0, 10.9, 6.0))[0] == 0.0  # tick rounding
    assert others_busy(CpuTimes(0.0, None, 5.0), CpuTimes(1.0, None, 5.5)) == (None, 0.5)


def test_busy_when_others_use_over_a_quarter_of_the_cpus_before_or_during() -> None:
    quiet = MachineLoad(cpus=4, loadavg_before=0.5, others_before=0.9, loadavg_during=1.0, others_during=0.2)
    assert not quiet.busy()
    assert MachineLoad(4, 3.0, 0.2, 3.0, 1.1).busy() and MachineLoad(4, None, 1.2, None, None).busy()
    assert MachineLoad(2, None, None, None, None).describe_before() == "not measurable on this OS"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_a_real_reading_counts_this_process_busy_loop_as_ours() -> None:
    start = read_cpu_times()
    while read_cpu_times().ours - start.ours < 0.3:  # spin 0.3 CPU-seconds of our own
        pass
    end = read_cpu_times()
    others, ours = others_busy(start, end)
    # Our CPU seconds are part of the machine's busy seconds (to a few clock ticks), and the split
    # hands them to us: ours over the wall interval is exactly our CPU time.
    assert end.busy - start.busy >= end.ours - start.ours - 0.05
    assert ours * (end.wall - start.wall) == pytest.approx(end.ours - start.ours)
    assert others is not None and others >= 0.0
