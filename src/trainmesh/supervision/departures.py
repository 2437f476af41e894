"""The watchdog outside ``fit``: from the process group's start to its teardown, a rank that waits
in a collective which a rank that has left will never join ends the run (status 124), naming
the ranks, where each one is and the likely cause; and the teardown's "leave together" barrier,
which ends within its timeout on every rank and names the ranks that did not arrive.

Why: after ``fit`` a collective called on some ranks only (``v.full_tensor()`` or
``trainer.save_checkpoint`` under ``if trainer.is_global_zero:``, a user's ``dist.all_reduce``)
waits for ranks that went on to the end of their script. Nothing failed until the process
group's timeout (30 minutes), and the step watchdog is not armed outside ``fit``.

How, through the run's c10d store (as the step watchdog, a connection of its own per thread):

- A rank that leaves (``leave_together``, called by the strategy's teardown: at the end of the
  script or ``Runtime.teardown``) writes its ``Departure`` (its collective counts per process
  group), then waits up to ``LEAVE_TIMEOUT`` for every rank to arrive, and says which did not.
- Every other rank's ``DepartureWatch`` thread checks one counter per poll. Once a rank has
  left, a rank that issued more collectives than it on a shared group waits in one that will
  never complete; when it has waited ``watchdog_timeout`` (or until shortly before the departed
  rank stops waiting for it, whichever comes first) it reports and ends the run with status 124.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from trainmesh.supervision.watchdog import answer_grace, end_process, poll_interval, record_for_agent

if TYPE_CHECKING:
    from trainmesh.supervision.departure_report import Departure, Waiting

LEAVE_TIMEOUT = 60.0  # seconds a rank waits at the teardown for the others before it leaves alone
_STORE_TIMEOUT = timedelta(seconds=10)

# Every process leaves its process groups in the same order: the count names the store keys of
# one teardown, so that a departure from an earlier group in this process is never read.
_leaves = itertools.count()
_next_leave = 0
_watch: DepartureWatch | None = None  # this process's watch of the current process group
_lock = threading.Lock()
_stopped_at = ""  # where trainer.should_stop ended this process's latest fit ("" if it did not)


class _Channel:
    """The keys of one teardown in the run's c10d store: ``departed`` (a counter), ``left/<rank>``
    (a ``Departure``) and ``waiting/<rank>`` (a ``Waiting``)."""

    def __init__(self, store: Any, *, rank: int, world_size: int, leave: int) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.prefix = f"trainmesh/departures/{leave}/"

    @classmethod
    def open(cls, leave: int) -> _Channel | None:
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        store = dist.distributed_c10d._get_default_store().clone()  # type: ignore[attr-defined]  # not in torch's stubs
        store.set_timeout(_STORE_TIMEOUT)
        return cls(store, rank=dist.get_rank(), world_size=dist.get_world_size(), leave=leave)

    def departed_count(self) -> int:
        count = self.count("departed")
        return 0 if count is None else count  # None: the store is gone (the run is ending)

    def count(self, key: str, add: int = 0) -> int | None:
        """The counter ``key`` after adding ``add``; None when the store is gone (its host, rank 0,
        has left the group)."""
        try:
            return int(self.store.add(self.prefix + key, add))
        except RuntimeError:
            return None

    def depart(self, departure: Departure) -> None:
        with contextlib.suppress(RuntimeError):
            self.store.set(f"{self.prefix}left/{self.rank}", departure.to_json())
            self.store.add(self.prefix + "departed", 1)  # after the record: whoever counts it finds it

    def read(self, kind: str, parse: Any) -> dict[int, Any]:
        found = {}
        for rank in range(self.world_size):
            with contextlib.suppress(RuntimeError, ValueError, TypeError):
                if self.store.check([f"{self.prefix}{kind}/{rank}"]):
                    found[rank] = parse(self.store.get(f"{self.prefix}{kind}/{rank}"))
        return found

    def publish_waiting(self, waiting: Waiting) -> None:
        with contextlib.suppress(RuntimeError):
            self.store.set(f"{self.prefix}waiting/{self.rank}", waiting.to_json())


def note_fit_ended(*, stopped_at: str) -> None:
    """Where ``trainer.should_stop`` ended this process's latest fit ("": it did not), told on departure."""
    global _stopped_at
    _stopped_at = stopped_at


def leave_together(*, timeout: float = LEAVE_TIMEOUT) -> list[int]:
    """Tell the other ranks this one is leaving the process group, and wait for every rank to
    arrive here, at most ``timeout`` seconds; returns the ranks that did not (and says so)."""
    global _next_leave
    leave = next(_leaves)
    _next_leave = leave + 1
    _stop_watch()
    channel = _Channel.open(leave)
    if channel is None:
        return []
    # The reports' modules: imported only where there are other ranks to tell (a channel).
    from trainmesh.supervision.call_site import call_site, thread_frames
    from trainmesh.supervision.departure_report import Departure
    from trainmesh.supervision.stall_report import collectives_issued

    mine = collectives_issued()  # before this teardown's own calls
    site = call_site(thread_frames(threading.get_ident()))
    where = site.user.place if site.user is not None else ""
    channel.depart(Departure(rank=channel.rank, collectives=mine, where=where, wait_s=timeout, stopped_at=_stopped_at))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        departed = channel.count("departed")
        if departed is None:
            # Rank 0 hosts the store and leaves only once every rank arrived or its own wait
            # ended: nothing more can be counted, and waiting on would only add the timeout.
            return []
        if departed >= channel.world_size:
            break
        time.sleep(0.05)
    missing = sorted(set(range(channel.world_size)) - set(channel.read("left", str)))
    _release(channel, everyone_arrived=not missing)
    if missing:
        print(
            f"trainmesh: rank {channel.rank} leaves the process group without {_ranks(missing)}, which did not "
            f"reach its teardown (the end of the script) within {timeout:g} s. A rank still working there "
            "finishes on its own; one waiting in a collective this rank no longer joins fails with that "
            "collective's error, or the watchdog ends it.",
            file=sys.stderr,
            flush=True,
        )
    return missing


def _release(channel: _Channel, *, everyone_arrived: bool) -> None:
    """Rank 0 hosts the store: it stays until every rank has seen the full count, or a peer
    still polling it would find the store gone and wait out its whole timeout."""
    released = channel.count("released", 1)
    if channel.rank != 0 or not everyone_arrived:
        return
    deadline = time.monotonic() + _STORE_TIMEOUT.total_seconds()
    while released is not None and released < channel.world_size and time.monotonic() < deadline:
        time.sleep(0.01)
        released = channel.count("released")


def watch_departures(timeout: float | None) -> None:
    """Arm this process's departure watch for the current process group (once per group; a
    later call sets the timeout), or disarm it (``timeout=None``)."""
    global _watch
    with _lock:
        group = dist.distributed_c10d._get_default_group() if dist.is_initialized() else None
        if _watch is not None and (_watch.group is not group or not _watch.alive()):
            # A watch of an earlier group: its thread stopped too, or it would poll that group's
            # store (and hold the group) for the rest of the process
            _watch.stop()
            _watch = None
        if timeout is None:
            if _watch is not None:
                _watch.stop()
                _watch = None
            return
        if _watch is not None:
            _watch.timeout = timeout
            return
        channel = _Channel.open(_next_leave)
        if channel is not None:
            _watch = DepartureWatch(channel, group, timeout=timeout)


def stop_watching() -> None:
    """Disarm this process's departure watch: a rank that raised, as it leaves its group at once.
    The watch holds the group, and while anything does, the group's connections stay open: a
    peer blocked in a collective this rank will never join then waits out the group's timeout
    (30 minutes) instead of failing at once with "Connection closed by peer"."""
    _stop_watch()


def _stop_watch() -> None:
    global _watch
    with _lock:
        if _watch is not None:
            _watch.stop()
        _watch = None


class DepartureWatch:
    """A daemon thread: ends the run when this rank waits in a collective that a rank which has
    left will never join (see the module's docstring)."""

    def __init__(self, channel: _Channel, group: Any, *, timeout: float) -> None:
        # What the thread reports with, imported here (by the thread that arms the watch), not by
        # the watch's thread while the main thread may be inside an import.
        from trainmesh.supervision import call_site, departure_report, stall_report  # noqa: F401

        self.channel, self.group, self.timeout = channel, group, timeout
        self._stopping = threading.Event()
        self._main = threading.main_thread().ident or 0
        self._thread = threading.Thread(target=self._watch, name="trainmesh-departures", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not threading.current_thread():
            # Its store calls end before this rank leaves: none may outlive the group's teardown.
            self._thread.join(timeout=_STORE_TIMEOUT.total_seconds())

    def _watch(self) -> None:
        from trainmesh.supervision.departure_report import Departure, groups_ahead  # imported by __init__
        from trainmesh.supervision.stall_report import collectives_issued

        since: float | None = None  # when this rank was first seen waiting for a departed rank
        first_seen: float | None = None  # when a departure was first read
        last: dict[str, int] = {}
        while not self._stopping.wait(poll_interval(self.timeout)):
            if not dist.is_initialized() or self.channel.departed_count() == 0:
                continue
            now, mine = time.monotonic(), collectives_issued()
            departed = self.channel.read("left", Departure.from_json)
            first_seen = first_seen if first_seen is not None else now
            waiting = any(groups_ahead(mine, d.collectives) for d in departed.values() if d.rank != self.channel.rank)
            if not waiting or mine != last:
                since, last = (now if waiting else None), mine
                continue
            assert since is not None
            # Fire by the timeout, and before the departed rank stops waiting here and leaves (its
            # exit would break this collective with a transport error instead of this message).
            leaves_at = first_seen + min(d.wait_s for d in departed.values()) - answer_grace(self.timeout)
            if now - since >= self.timeout or now >= leaves_at:
                self._end_run(waited=now - since, departed=departed, mine=mine)

    def _end_run(self, *, waited: float, departed: dict[int, Departure], mine: dict[str, int]) -> None:
        from trainmesh.supervision.call_site import thread_frames  # imported by __init__
        from trainmesh.supervision.departure_report import Waiting, departure_message
        from trainmesh.supervision.stall_report import EXIT_STATUS

        try:
            channel = self.channel
            waiting = Waiting(
                rank=channel.rank, waited_s=round(waited, 1), collectives=mine, frames=thread_frames(self._main)
            )
            channel.publish_waiting(waiting)
            # Other ranks that wait too report within a poll; a short grace lets the message name them.
            others = set(range(channel.world_size)) - set(departed) - {channel.rank}
            deadline = time.monotonic() + (answer_grace(self.timeout) if others else 0.0)
            while time.monotonic() < deadline and not others <= set(channel.read("waiting", str)):
                time.sleep(0.1)
            reports = {**channel.read("waiting", Waiting.from_json), channel.rank: waiting}
            message = departure_message(reports, departed, world_size=channel.world_size, timeout=self.timeout)
            # Under an elastic agent the message goes to the error file, which the agent prints.
            if not record_for_agent(message) and channel.rank == min(reports):
                print(message, file=sys.stderr, flush=True)
        finally:
            end_process(EXIT_STATUS)


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
