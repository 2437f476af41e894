"""How busy the machine is around each measured N: a sweep on a machine that other processes keep
busy measures contention, not scaling, and the reader of its table needs to know that.

Two figures, both from the operating system and neither from torch:

- the 1-minute load average (``os.getloadavg``): runnable processes, slow to move, everywhere on Unix;
- the CPUs kept busy by *other* processes (Linux ``/proc/stat``): every CPU's busy time over an
  interval, less the CPU time this sweep's own processes used in it (its finished workers', counted
  by ``os.times().children_*``, and its own).

>>> load = MachineLoad(cpus=2, loadavg_before=0.4, others_before=0.1, loadavg_during=2.1, others_during=0.2)
>>> load.describe_before(), load.describe_during()
('others kept 0.10 of 2 CPUs busy, load average 0.40', 'others kept 0.20 of 2 CPUs busy, load average 2.10')
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

# Other processes busier than this share of the CPUs make the figures contention, not scaling.
BUSY_SHARE = 0.25


@dataclass(frozen=True)
class MachineLoad:
    """The machine's load in the second before one N was launched and over its whole launch.

    ``others_*`` is in CPUs (2.0: two CPUs' worth of time), None where ``/proc/stat`` is missing;
    ``loadavg_*`` is None where the OS has no load average."""

    cpus: int
    loadavg_before: float | None
    others_before: float | None
    loadavg_during: float | None
    others_during: float | None
    ours_during: float | None = None  # this sweep's own CPUs over the launch (workers and this process)

    def describe_before(self) -> str:
        return _describe(self.others_before, self.loadavg_before, self.cpus)

    def describe_during(self) -> str:
        text = _describe(self.others_during, self.loadavg_during, self.cpus)
        return text if self.ours_during is None else f"{text}; the sweep's own processes {self.ours_during:.2f}"

    def busy(self) -> bool:
        """Whether other processes used more than ``BUSY_SHARE`` of the CPUs before or during."""
        others = [x for x in (self.others_before, self.others_during) if x is not None]
        return any(x > BUSY_SHARE * self.cpus for x in others)


def _describe(others: float | None, loadavg: float | None, cpus: int) -> str:
    parts = []
    if others is not None:
        parts.append(f"others kept {others:.2f} of {cpus} CPUs busy")
    if loadavg is not None:
        parts.append(f"load average {loadavg:.2f}")
    return ", ".join(parts) or "not measurable on this OS"


@dataclass(frozen=True)
class CpuTimes:
    """One reading: wall time, all CPUs' busy and total seconds, and this process's own and its
    finished children's CPU seconds."""

    wall: float
    busy: float | None
    ours: float


def read_cpu_times(stat_path: str = "/proc/stat") -> CpuTimes:
    times = os.times()
    ours = times.user + times.system + times.children_user + times.children_system
    return CpuTimes(wall=time.monotonic(), busy=_busy_seconds(stat_path), ours=ours)


def others_busy(start: CpuTimes, end: CpuTimes) -> tuple[float | None, float]:
    """(CPUs busy with other processes, CPUs busy with ours) between two readings.

    Ours counts only children already waited for: read ``end`` after joining the workers.

    >>> others_busy(CpuTimes(0.0, 10.0, 1.0), CpuTimes(2.0, 13.0, 2.0))
    (1.0, 0.5)
    """
    wall = max(end.wall - start.wall, 1e-9)
    ours = (end.ours - start.ours) / wall
    if start.busy is None or end.busy is None:
        return None, ours
    # Busy time counted in whole clock ticks, ours in finer units: never below zero.
    return max(0.0, (end.busy - start.busy) / wall - ours), ours


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has none
        return None


def sample_before(seconds: float = 1.0) -> tuple[float | None, float | None]:
    """(load average, CPUs busy with other processes) over ``seconds`` of this process idling."""
    start = read_cpu_times()
    time.sleep(seconds)
    others, _ = others_busy(start, read_cpu_times())
    return load_average(), others


def cpu_count(stat_path: str = "/proc/stat") -> int:
    """The machine's CPUs as ``/proc/stat`` lists them (every CPU, whatever this process's affinity)."""
    try:
        with open(stat_path) as file:
            count = sum(1 for line in file if line.startswith("cpu") and line[3:4].isdigit())
    except OSError:
        count = 0
    return count or os.cpu_count() or 1


def _busy_seconds(stat_path: str) -> float | None:
    """All CPUs' non-idle time in seconds: the first line's fields less idle and iowait; guest
    time is already inside user and nice, so it is left out of the sum."""
    try:
        with open(stat_path) as file:
            fields = [int(x) for x in file.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 4:
        return None
    busy = sum(fields[:8]) - fields[3] - (fields[4] if len(fields) > 4 else 0)
    return busy / os.sysconf("SC_CLK_TCK")
