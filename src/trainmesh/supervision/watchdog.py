"""The stuck-rank watchdog: a run in which no step completes on some rank for
``Trainer(watchdog_timeout=...)`` seconds ends, naming the rank the others wait for.

Why: a rank stuck outside a collective (a sleep, a deadlock, a dead file system) leaves the
other ranks blocked inside the next one. Nothing fails until the process group's own timeout
(30 minutes by default) fires, and then on a rank that *waited*, which is the one blamed.

How, in each process:

- The loop calls :meth:`StepWatchdog.feed` (as ``runtime.supervision.step_done()``) after every
  training and evaluation step: a clock read and two attribute writes, nothing else on the hot
  path (no collective, no store call).
- A daemon thread wakes every ``poll`` seconds (a tenth of the timeout, at most 2 s). When its
  own rank has not completed a step within the allowance, or when another rank's watchdog
  raised the alarm in the run's c10d store, it ends the run (``_end_run``): it publishes its
  report (steps, the collectives it issued per process group, its training thread's stack) in
  the store, dumps its threads with faulthandler, waits for the others' reports (a rank whose
  fit already ended left a mark instead), and decides (``stall_report.decide``): the rank that
  issued fewer collectives is the one that did not arrive. Every rank records the verdict in
  its elastic error file, which the agent prints (without an agent, the lowest rank that
  answered prints it); the stuck rank ends first, with status 124, so that the agent names
  it; the others follow, or are stopped by the agent. Everything between two steps (hooks,
  logging, the next batch) counts as part of the step.
- The store answers while every training thread is blocked in a collective: its server is the
  elastic agent's (or rank 0's) own thread, and each watchdog talks to it over a connection of
  its own (``Store.clone``). Until a rank stalls, each watchdog only checks one key per poll.

Legitimate slow work: the fit's first step (compilation, pipeline shape inference, DDP's first
bucket rebuild) gets three times the timeout (kept below the process group's timeout), and
checkpoint saves pause the clock (:meth:`StepWatchdog.paused`). A training thread that holds
the interpreter inside C code forever stops the watchdog's thread too; the process group's
timeout is then the backstop. The sanity check and ``validate``/``test``/``predict`` outside
``fit`` are not watched.

One process: nothing can wait on a peer, so the default (``watchdog_timeout="auto"``) does not arm
there, and a long hook (an epoch-end callback sampling for minutes) finishes as under Lightning,
which has no watchdog. A timeout given explicitly is kept on one process too: the user asked for it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import itertools
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

import torch.distributed as dist

from trainmesh.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from trainmesh.supervision.stall_report import RankReport

DEFAULT_TIMEOUT = 300.0  # seconds: far below the process group's 30 minutes, far above a step
AUTO = "auto"  # the Trainer's default: DEFAULT_TIMEOUT where the run has several processes, off on one
FIRST_STEP_FACTOR = 3  # as torchtitan, whose first-step timeout is three times its step timeout
_EXIT_DELAY = 3.0  # how long a rank that is not stuck waits for the agent to stop it (it polls every 0.1 s)
_STORE_TIMEOUT = timedelta(seconds=10)  # one store call of the watchdog's, at most


class StuckRankError(RuntimeError):
    """What a worker's elastic error file says when the watchdog ended the run."""


def check_timeout(timeout: Any) -> float | None:
    """``Trainer(watchdog_timeout=...)`` checked: positive finite seconds, or None (off); ``"auto"`` is
    ``DEFAULT_TIMEOUT`` (read now), which ``StepWatchdog.start`` arms only where there are several processes."""
    if timeout is None:
        return None
    if isinstance(timeout, str) and timeout == AUTO:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"watchdog_timeout={timeout!r} ({type(timeout).__name__}): it is the number of seconds a rank may "
            f'go without completing a step before the run is ended; give a number ("auto", the default: '
            f"{DEFAULT_TIMEOUT:g} on several processes, off on one) or None to turn the watchdog off"
        )
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(
            f"watchdog_timeout={timeout!r}: the seconds a rank may go without completing a step must be "
            f"positive and finite; give e.g. {DEFAULT_TIMEOUT:g}, or None to turn the watchdog off"
        )
    return float(timeout)


def poll_interval(timeout: float) -> float:
    return min(2.0, max(0.05, timeout / 10))


def answer_grace(timeout: float) -> float:
    """How long a rank that fired waits for the others' reports (each answers within a poll)."""
    return 2 * poll_interval(timeout) + 5.0


class StepWatchdog:
    """Ends a run in which no training or evaluation step completed on some rank for
    ``timeout`` seconds, naming the rank that did not arrive and where it was; exit status 124.

    >>> watchdog = StepWatchdog(timeout=120)
    >>> watchdog.start(processes=1); watchdog.feed(); watchdog.stop()
    >>> StepWatchdog(timeout=None).timeout is None  # off
    True
    >>> StepWatchdog().timeout, StepWatchdog().chosen  # "auto": armed on several processes only
    (300.0, False)
    """

    # Each fit starts one watch on every rank, in the same order: the count names the store
    # keys of this watch, so that an alarm of an earlier fit in this process is never read.
    _watches = itertools.count()

    def __init__(self, timeout: float | str | None = AUTO) -> None:
        self.timeout = check_timeout(timeout)
        # Given by the user (a number, or None): kept on one process too; "auto" arms on several only.
        self.chosen = not (isinstance(timeout, str) and timeout == AUTO)
        self.last_step_at = 0.0  # time.monotonic() when the last step completed
        self.steps_done = 0
        self._pauses = 0
        self._ending = False
        self._thread: threading.Thread | None = None
        self._channel: _RankChannel | None = None
        self._stopping = threading.Event()
        self._first_allowance = 0.0
        self._loop_thread = 0  # threading.get_ident() of the thread that runs the loop
        self.stopped_at = ""  # where trainer.should_stop ended the loop watched ("": it did not; service.fit_ended)

    def __reduce__(self) -> tuple[Any, ...]:
        # ddp_spawn pickles the Trainer: the watch itself (thread, store) never travels.
        return (StepWatchdog, (self.timeout if self.chosen else AUTO,))

    def feed(self) -> None:
        """A step completed (called by the loops after every training and evaluation step)."""
        self.last_step_at = time.monotonic()
        self.steps_done += 1

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the clock for work that may legitimately take long (a checkpoint save); a paused
        rank still answers another rank's alarm."""
        self._pauses += 1
        try:
            yield
        finally:
            self._pauses -= 1
            self.last_step_at = time.monotonic()

    def start(self, *, processes: int) -> None:
        """Watch the calling thread's loop until :meth:`stop` (``processes``: the run's world size; on
        one, only a timeout the user chose arms: nothing can wait on a peer there)."""
        watch = next(StepWatchdog._watches)
        if self.timeout is None or (processes == 1 and not self.chosen):
            return
        assert self._thread is None, "a watch is already running"
        # The verdict's module, imported by the thread that starts the watch, not by the watch's
        # thread when the loop is stuck (nor by a process that never watches a loop).
        from trainmesh.supervision import stall_report  # noqa: F401

        group_timeout = _default_group_timeout()
        if not self.chosen:
            # "auto" fits under the group's timeout a program set (Lightning's DDPStrategy(timeout=)):
            # a warning about watchdog_timeout, which no Lightning program sets, would be noise.
            self.timeout = _auto_timeout(group_timeout)
            if self.timeout is None:
                return
        self._channel = _RankChannel.open(watch)
        _warn_if_group_times_out_first(self.timeout, group_timeout)
        self._first_allowance = _first_step_allowance(self.timeout, group_timeout)
        self._loop_thread = threading.get_ident()
        self._stopping = threading.Event()
        self.steps_done, self.last_step_at, self._ending, self.stopped_at = 0, time.monotonic(), False, ""
        self._thread = threading.Thread(target=self._watch, name="trainmesh-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        if self._ending:
            # The watchdog is ending this process. The training thread gets here when a stuck
            # peer's exit breaks its collective; going on would report that error (and exit)
            # before the agent hears of the stuck rank, so it waits for the watchdog instead.
            thread.join()
        thread.join(timeout=10.0)
        if self._channel is not None:
            self._channel.mark_finished(self.stopped_at)  # a rank still in the loop is then the one behind
        self._thread = self._channel = None

    def _watch(self) -> None:
        assert self.timeout is not None
        poll = poll_interval(self.timeout)
        while not self._stopping.wait(poll):
            allowance = self._first_allowance if self.steps_done == 0 else self.timeout
            stalled = self._pauses == 0 and time.monotonic() - self.last_step_at > allowance
            if stalled or (self._channel is not None and self._channel.alarm_raised()):
                self._end_run(stalled=stalled)
                return

    def _end_run(self, *, stalled: bool) -> None:
        from trainmesh.supervision.stall_report import EXIT_STATUS  # imported by start()

        self._ending = True
        try:
            self._report_and_wait(stalled=stalled)
        finally:
            end_process(EXIT_STATUS)  # the training thread is stuck: nothing else can end the process

    def _report_and_wait(self, *, stalled: bool) -> None:
        from trainmesh.supervision.stall_report import RankReport, collectives_issued, decide, loop_thread_stack

        assert self.timeout is not None
        channel, rank = self._channel, _rank()
        report = RankReport(
            rank=rank,
            stalled=stalled,
            idle_s=round(time.monotonic() - self.last_step_at, 1),
            steps=self.steps_done,
            collectives=collectives_issued(),
            stack=loop_thread_stack(self._loop_thread),
        )
        grace = answer_grace(self.timeout)
        if channel is not None:
            channel.publish(report, alarm=stalled)
        _dump_threads(rank)
        reports, finished = channel.gather(grace) if channel is not None else ({}, {})
        reports[rank] = report
        world_size = channel.world_size if channel is not None else 1
        stopped = {rank: place for rank, place in finished.items() if place}
        verdict = decide(reports, world_size=world_size, timeout=self.timeout, finished=finished, stopped=stopped)
        # Under an elastic agent the verdict goes to the error file, which the agent prints as
        # the run's failure (once, after every worker has stopped); else the reporter prints it.
        # The rank that ends first records it at once; the others only once they have waited for
        # the agent to stop them, so that their records are later and the agent names that rank.
        under_agent = "TORCHELASTIC_ERROR_FILE" in os.environ
        if verdict.exits_first(rank):
            record_for_agent(verdict.message)
        if rank == verdict.reporter:
            if not under_agent:
                print(verdict.message, file=sys.stderr, flush=True)
            if channel is not None:
                channel.mark_printed()
        if verdict.exits_first(rank):
            if channel is not None and rank != verdict.reporter:
                channel.wait_printed(grace)  # the agent stops the reporter once this rank ends
            return
        time.sleep(_EXIT_DELAY)
        record_for_agent(verdict.message)  # the agent has not stopped this rank: it may be the one it names


class _RankChannel:
    """The run's c10d store as a side channel between the ranks' watchdog threads. Nothing is
    written to it until a rank stalls; until then each watchdog checks one key per poll."""

    def __init__(self, store: Any, *, rank: int, world_size: int, watch: int) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.prefix = f"trainmesh/watchdog/{watch}/"

    @classmethod
    def open(cls, watch: int) -> _RankChannel | None:
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        # A clone is a connection of its own (torch's way to use a store from several threads):
        # this thread never waits behind a store call of the training thread.
        store = dist.distributed_c10d._get_default_store().clone()  # type: ignore[attr-defined]  # not in torch's stubs
        store.set_timeout(_STORE_TIMEOUT)
        return cls(store, rank=dist.get_rank(), world_size=dist.get_world_size(), watch=watch)

    def alarm_raised(self) -> bool:
        try:
            return self.store.check([self.prefix + "alarm"])
        except RuntimeError:  # the store is gone (the run is ending): nothing to answer
            return False

    def publish(self, report: RankReport, *, alarm: bool) -> None:
        with contextlib.suppress(RuntimeError):
            self.store.set(f"{self.prefix}report/{self.rank}", report.to_json())
            self.store.add(self.prefix + "answered", 1)
            if alarm:  # after the report, so that whoever reads the alarm finds it
                self.store.set(self.prefix + "alarm", str(self.rank))

    def gather(self, grace: float) -> tuple[dict[int, RankReport], dict[int, str]]:
        """Every rank's report that arrives within ``grace`` seconds, and the ranks that had
        finished the loop instead (each with where ``trainer.should_stop`` ended it, or "")."""
        from trainmesh.supervision.stall_report import RankReport  # imported by start()

        deadline = time.monotonic() + grace
        with contextlib.suppress(RuntimeError):
            # One counter of the ranks that reported or finished: one store call per look.
            while self.store.add(self.prefix + "answered", 0) < self.world_size and time.monotonic() < deadline:
                time.sleep(0.05)
        reports, finished = {}, {}
        for rank in range(self.world_size):
            with contextlib.suppress(RuntimeError, ValueError, TypeError):
                if self.store.check([f"{self.prefix}report/{rank}"]):
                    reports[rank] = RankReport.from_json(self.store.get(f"{self.prefix}report/{rank}"))
                elif self.store.check([f"{self.prefix}finished/{rank}"]):
                    mark = self.store.get(f"{self.prefix}finished/{rank}").decode()
                    finished[rank] = "" if mark == "1" else mark
        return reports, finished

    def mark_finished(self, stopped_at: str = "") -> None:
        with contextlib.suppress(RuntimeError):
            self.store.set(f"{self.prefix}finished/{self.rank}", stopped_at or "1")
            self.store.add(self.prefix + "answered", 1)

    def mark_printed(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.store.set(self.prefix + "printed", "1")

    def wait_printed(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        with contextlib.suppress(RuntimeError):
            while not self.store.check([self.prefix + "printed"]) and time.monotonic() < deadline:
                time.sleep(0.05)


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _default_group_timeout() -> float | None:
    """The default process group's collective timeout in seconds (None: no group)."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    group = dist.distributed_c10d._get_default_group()
    try:
        return group._get_backend(group._device_types[0]).options._timeout.total_seconds()
    except (AttributeError, IndexError, RuntimeError):
        return None


def _auto_timeout(group_timeout: float | None) -> float | None:
    """``watchdog_timeout="auto"``: ``DEFAULT_TIMEOUT``, or, under a shorter process group timeout, a
    timeout that still fires (with its poll and the others' answers) before the group's does; off
    where the group's timeout is too short for that (it then ends a stuck run soon anyway).

    >>> _auto_timeout(None), _auto_timeout(1800.0), _auto_timeout(200.0), _auto_timeout(4.0)
    (300.0, 300.0, 97.5, None)
    """
    if group_timeout is None:
        return DEFAULT_TIMEOUT
    # t + poll + answer_grace(t) = t + 3 poll + 5 < group_timeout, with poll at most t / 10.
    fitted = min(DEFAULT_TIMEOUT, (group_timeout - 5.0) / 2)
    return fitted if fitted > 0 else None


def _first_step_allowance(timeout: float, group_timeout: float | None) -> float:
    longer = FIRST_STEP_FACTOR * timeout
    if group_timeout is not None:
        # Still fire before the group's own timeout, which would blame a waiting rank.
        longer = min(longer, group_timeout - answer_grace(timeout) - poll_interval(timeout))
    return max(timeout, longer)


def _warn_if_group_times_out_first(timeout: float, group_timeout: float | None) -> None:
    if group_timeout is not None and timeout + poll_interval(timeout) + answer_grace(timeout) >= group_timeout:
        rank_zero_warn(
            f"watchdog_timeout={timeout:g} s is not well below the process group's timeout ({group_timeout:g} s, "
            "the strategy's timeout=): a stuck rank is then ended by that timeout, which reports a rank that "
            "waited instead of the one that did not arrive. Lower watchdog_timeout, or raise the strategy's timeout"
        )


def _dump_threads(rank: int) -> None:
    stream = sys.stderr if _has_fileno(sys.stderr) else sys.__stderr__
    if stream is None or not _has_fileno(stream):
        return
    print(f"\ntrainmesh watchdog: rank {rank}'s threads, most recent call first:", file=stream, flush=True)
    faulthandler.dump_traceback(file=stream, all_threads=True)


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


def record_for_agent(message: str) -> bool:
    """Put the verdict in this worker's elastic error file, which the agent reports; False
    when this process has no elastic agent."""
    if "TORCHELASTIC_ERROR_FILE" not in os.environ:
        return False
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    try:
        raise StuckRankError(message)
    except StuckRankError as error:  # raised so that the handler's traceback is not empty
        ErrorHandler().record_exception(error)
    return True


def end_process(status: int) -> NoReturn:
    """End this process at once from a watchdog's thread (the main thread is stuck), output flushed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
