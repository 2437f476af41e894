"""What the step watchdog learns about each rank when a run stalls, and which rank it blames.

Kept apart from the watchdog's thread (``watchdog.py``) so that the verdict, which rank the
others wait for, is a plain function of the ranks' reports, testable without processes.

The evidence is torch's own: every process group counts the collectives each rank issued on
it (its sequence number). A rank that is stuck outside a collective (a sleep, a deadlock, a
dead filesystem) has issued fewer than the ranks that are blocked inside the next one waiting
for it, so "behind in some group" is "did not arrive".
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass

import torch.distributed as dist

from trainmesh.launchers import exit_status

MAX_STACK_FRAMES = 40  # the innermost ones: where a rank is matters, not the launcher's frames
EXIT_STATUS = exit_status.STALLED  # as timeout(1): the run was ended because it stopped making progress


@dataclass(frozen=True)
class RankReport:
    """One rank's state when the watchdog fired (its own stall, or another rank's alarm)."""

    rank: int
    stalled: bool  # no step completed on it within its allowance
    idle_s: float  # seconds since its last step completed (or since the watch began)
    steps: int  # steps completed since the watch began
    collectives: dict[str, int]  # process-group name -> collectives this rank issued on it
    stack: list[str]  # the training thread's frames, outermost first (traceback.format_stack)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> RankReport:
        return cls(**json.loads(text))

    @property
    def where(self) -> str:
        """The innermost frame, as ``file.py:31 in training_step``."""
        if not self.stack:
            return "an unknown place (its training thread was not found)"
        first_line = self.stack[-1].strip().splitlines()[0]
        match = _FRAME.match(first_line)
        return f"{os.path.basename(match[1])}:{match[2]} in {match[3]}" if match else first_line


_FRAME = re.compile(r'File "(.*)", line (\d+), in (.*)')  # a traceback.format_stack entry's first line


@dataclass(frozen=True)
class Verdict:
    """Whom to blame, who says so, and who ends first."""

    stuck: tuple[int, ...]  # the ranks the others wait for; empty when none can be singled out
    answered: tuple[int, ...]  # the ranks whose report arrived
    reporter: int  # the rank that prints the message: the lowest that answered
    message: str

    def exits_first(self, rank: int) -> bool:
        # The elastic agent reports the first worker to fail, so the stuck ranks end first and
        # the report names one of them; when none of them answered, the reporter ends first.
        answering = [r for r in self.stuck if r in self.answered]
        return rank in answering if answering else rank == self.reporter


def loop_thread_stack(thread_id: int) -> list[str]:
    """The Python stack of the thread that runs the loop, outermost first."""
    frame = sys._current_frames().get(thread_id)
    return traceback.format_stack(frame)[-MAX_STACK_FRAMES:] if frame is not None else []


def collectives_issued() -> dict[str, int]:
    """How many collectives this process issued on each process group it belongs to."""
    if not (dist.is_available() and dist.is_initialized()):
        return {}
    counts: dict[str, int] = {}
    for group, name in list(dist.distributed_c10d._world.pg_names.items()):
        try:
            counts[name] = group._get_sequence_number_for_group()  # type: ignore[attr-defined]  # private, caught below
        except (AttributeError, RuntimeError):  # a backend that keeps no count
            continue
    return counts


def ranks_behind(reports: Mapping[int, RankReport]) -> list[int]:
    """The ranks that issued fewer collectives on some group than another member of it."""
    behind: set[int] = set()
    for name in {name for report in reports.values() for name in report.collectives}:
        counts = {rank: report.collectives[name] for rank, report in reports.items() if name in report.collectives}
        most = max(counts.values())
        behind |= {rank for rank, count in counts.items() if count < most}
    return sorted(behind)


def decide(
    reports: Mapping[int, RankReport],
    *,
    world_size: int,
    timeout: float,
    finished: Collection[int] = (),
    stopped: Mapping[int, str] | None = None,
) -> Verdict:
    """The verdict on a stalled run from the reports that arrived (at least the caller's own);
    ``finished``: ranks that left the loop (their watch ended normally), so not stuck; ``stopped``:
    those of them whose loop ``trainer.should_stop`` ended, with where it was set."""
    assert reports, "the rank that decides has its own report"
    answered = tuple(sorted(reports))
    missing = [rank for rank in range(world_size) if rank not in reports and rank not in finished]
    behind = ranks_behind(reports)
    # Blame, in order of evidence: fewer collectives issued; no answer; still in the loop that
    # others have finished.
    stuck = tuple(behind or missing or (answered if finished else ()))
    if world_size == 1:
        message = _single_process_message(reports[answered[0]], timeout)
    else:
        message = _distributed_message(
            reports,
            stuck=list(stuck),
            behind=bool(behind),
            missing=missing,
            finished=sorted(finished),
            stopped=stopped or {},
            timeout=timeout,
        )
    return Verdict(stuck=stuck, answered=answered, reporter=answered[0], message=message)


def _single_process_message(report: RankReport, timeout: float) -> str:
    return (
        f"trainmesh watchdog: no training or validation step completed for {report.idle_s:.1f} s "
        f"(watchdog_timeout={timeout:g}).\nWhere this process was (its training thread, most recent "
        f"call last):\n{''.join(report.stack)}{_advice()}"
    )


def _distributed_message(
    reports: Mapping[int, RankReport],
    *,
    stuck: list[int],
    behind: bool,
    missing: list[int],
    finished: list[int],
    stopped: Mapping[int, str],
    timeout: float,
) -> str:
    idle = max(report.idle_s for report in reports.values())
    head = (
        f"trainmesh watchdog: {_ranks(stuck)} did not arrive. No step completed for {idle:.1f} s "
        f"(watchdog_timeout={timeout:g})"
    )
    if behind:
        lines = [
            f"{head} and the other ranks wait for {_them(stuck)} in a collective: {_collective_counts(reports, stuck)}."
        ]
    elif missing:
        lines = [
            f"{head} and did not answer the watchdog either: a thread holds the interpreter there (a call "
            "into C code that never returns), or the process is stopped."
        ]
    elif stuck:
        lines = [
            f"{head}, while {_ranks(finished)} finished the loop and wait{'s' if len(finished) == 1 else ''} "
            f"for {_them(stuck)}."
        ]
        if stopped:
            lines.append(f"Likely cause: {should_stop_cause(stopped, stuck)}.")
    else:
        lines = [
            f"trainmesh watchdog: no step completed for {idle:.1f} s (watchdog_timeout={timeout:g}), and no "
            "rank is behind the others in collectives: every rank is stuck outside them (a data loader, a "
            "file system, a lock)."
        ]
    shown = [rank for rank in stuck if rank in reports] or ([] if missing else sorted(reports))
    for rank in shown:
        lines.append(f"Where rank {rank} was (its training thread, most recent call last):")
        lines.append("".join(reports[rank].stack).rstrip("\n"))
    lines.append("Every rank (each one's threads are dumped above, most recent call first):")
    for rank in sorted({*reports, *missing, *finished}):
        report = reports.get(rank)
        if report is None:
            stop = f" on trainer.should_stop set at {stopped[rank]}" if rank in stopped else ""
            lines.append(f"  rank {rank}: {'finished the loop' + stop if rank in finished else 'no answer'}")
        else:
            lines.append(
                f"  rank {rank}: {report.steps} steps completed, idle {report.idle_s:.1f} s, at {report.where}"
            )
    return "\n".join(lines) + "\n" + _advice()


def should_stop_cause(stopped: Mapping[int, str], stuck: list[int]) -> str:
    """``trainer.should_stop`` ended the ``stopped`` ranks' fit (where it was set, by rank) while ``stuck`` ones
    went on: the flag was set on some ranks only. Lightning defines nothing there (each of its ranks stops by
    its own flag; gloo then fails with "Connection closed by peer", NCCL hangs). "" without such ranks."""
    if not stopped:
        return ""
    ranks = sorted(stopped)
    where = "; ".join(f"on rank {rank} at {stopped[rank]}" for rank in ranks)
    return (
        f"trainer.should_stop was set on {_ranks(ranks)} only ({where}): {_ranks(ranks)} ended "
        f"{'its' if len(ranks) == 1 else 'their'} fit there while {_ranks(stuck)} went on to the next step's "
        "collectives. Every rank must stop together: decide on a value every rank has (a metric logged with "
        "sync_dist=True, as EarlyStopping does), or agree on the decision before setting it: "
        "trainer.should_stop = trainer.strategy.reduce_boolean_decision(stop, all=False)"
    )


def _collective_counts(reports: Mapping[int, RankReport], behind: list[int]) -> str:
    """``on process group 0, rank 1 issued 7 collectives, the others up to 8``, where they differ."""
    parts = []
    for name in sorted({name for report in reports.values() for name in report.collectives}):
        counts = {rank: r.collectives[name] for rank, r in reports.items() if name in r.collectives}
        late = ", ".join(f"rank {rank} issued {counts[rank]}" for rank in behind if rank in counts)
        if late and len(set(counts.values())) > 1:
            parts.append(f"on process group {name}, {late} collectives, the others up to {max(counts.values())}")
    return "; ".join(parts)


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _them(ranks: list[int]) -> str:
    return "it" if len(ranks) == 1 else "them"


def _advice() -> str:
    return (
        f"The run ends with exit status {EXIT_STATUS}. If a step can take this long, raise "
        "Trainer(watchdog_timeout=...) (seconds); watchdog_timeout=None turns the watchdog off."
    )
