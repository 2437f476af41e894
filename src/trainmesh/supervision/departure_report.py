"""What a rank that leaves the process group tells the others (``Departure``), what a rank that
waits in a collective no departed rank will join reports (``Waiting``), and the message that
ends such a run: a plain function of those records (``departures.py`` gathers them).

The evidence is torch's own, as for the stuck-rank watchdog (``stall_report.py``): every process
group counts the collectives each rank issued on it. A rank that issued more collectives on a
group than a rank that has left it waits in one that rank will never join.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from trainmesh.supervision.call_site import CallSite, Frame, call_site, format_frames
from trainmesh.supervision.stall_report import EXIT_STATUS, should_stop_cause


@dataclass(frozen=True)
class Departure:
    """A rank that reached the process group's teardown (its end of script, or Runtime.teardown)."""

    rank: int
    collectives: dict[str, int]  # process-group name -> collectives this rank issued on it
    where: str  # the user's line that left ("" at interpreter exit: the end of its script)
    wait_s: float  # how long it waits there for the others before it leaves without them
    stopped_at: str = ""  # where trainer.should_stop ended its latest fit ("file:line in hook"; "": it did not)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Departure:
        return cls(**json.loads(text))

    def describe(self) -> str:
        place = f"at {self.where}" if self.where else "at the end of its script"
        return f"left the process group {place}; it waits there up to {self.wait_s:g} s for the others, then exits"


@dataclass(frozen=True)
class Waiting:
    """A rank that waits in a collective that a departed rank will never join."""

    rank: int
    waited_s: float  # seconds since it was seen waiting there
    collectives: dict[str, int]
    frames: list[Frame] = field(default_factory=list)  # its main thread, outermost first

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Waiting:
        fields = json.loads(text)
        return cls(**{**fields, "frames": [Frame(**frame) for frame in fields["frames"]]})

    @property
    def site(self) -> CallSite:
        return call_site(self.frames)


def groups_ahead(mine: Mapping[str, int], theirs: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """The process groups on which ``mine`` issued more collectives than ``theirs``: the ones whose
    latest collective the other rank never issued. ``{group: (mine, theirs)}``."""
    return {name: (count, theirs[name]) for name, count in mine.items() if name in theirs and count > theirs[name]}


def departure_message(
    waiting: Mapping[int, Waiting], departed: Mapping[int, Departure], *, world_size: int, timeout: float
) -> str:
    """The message that ends a run in which ``waiting`` ranks wait for ``departed`` ones."""
    stuck, gone = sorted(waiting), sorted(departed)
    first = waiting[stuck[0]]
    ahead = "; ".join(
        f"on process group {name} {_ranks([rank])} issued {mine} collectives, {_ranks(gone)} {theirs}"
        for rank in stuck
        for name, (mine, theirs) in sorted(_ahead_of_any(waiting[rank], departed).items())
    )
    lines = [
        f"trainmesh watchdog: {_ranks(stuck)} {_verb(stuck, 'wait')} in a collective that {_ranks(gone)} will "
        f"never join: {_ranks(gone)} left the process group, and {_ranks(stuck)} issued more collectives "
        f"({ahead}). Waited {max(w.waited_s for w in waiting.values()):.1f} s (watchdog_timeout={timeout:g}).",
        "Where each rank is:",
    ]
    for rank in range(world_size):
        if rank in waiting:
            lines.append(f"  rank {rank}: waits {waiting[rank].site.describe()}")
        elif rank in departed:
            lines.append(f"  rank {rank}: {departed[rank].describe()}")
        else:
            lines.append(f"  rank {rank}: no answer (neither left nor waiting)")
    # Inside fit's loop (trainer/fit_loop.py's run_fit); a wait after every rank's fit ended has another cause
    in_fit = any(frame.function == "run_fit" for frame in first.frames)
    stopped = {rank: d.stopped_at for rank, d in departed.items() if d.stopped_at} if in_fit else {}
    lines.append(f"Likely cause: {should_stop_cause(stopped, stuck) or first.site.cause(_ranks(stuck))}.")
    for rank in stuck:
        lines.append(f"Rank {rank}'s stack (its main thread, most recent call last):")
        lines.append(format_frames(waiting[rank].frames).rstrip("\n"))
    lines.append(
        f"The run ends with exit status {EXIT_STATUS}. A rank that may legitimately wait this long in a collective "
        "needs a larger Trainer(watchdog_timeout=...) (seconds); watchdog_timeout=None turns the watchdog off."
    )
    return "\n".join(lines)


def _ahead_of_any(waiting: Waiting, departed: Mapping[int, Departure]) -> dict[str, tuple[int, int]]:
    ahead: dict[str, tuple[int, int]] = {}
    for departure in departed.values():
        ahead.update(groups_ahead(waiting.collectives, departure.collectives))
    return ahead


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _verb(ranks: list[int], verb: str) -> str:
    return verb + "s" if len(ranks) == 1 else verb
