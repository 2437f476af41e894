"""The run's supervision as one service, reached through ``Runtime.supervision``.

Three watches that the loop only feeds and asks, so that the Trainer side never touches
``torch.distributed``, the process group's store or the launcher itself:

- the stuck-rank watchdog (``watchdog.py``, its verdict in ``stall_report.py``): a run in which
  no step completes on some rank for ``watchdog_timeout`` seconds ends with status 124, naming
  the rank the others wait for; outside ``fit`` too, from the process group's start to its
  teardown (``departures.py``), a rank waiting in a collective that a rank which has left will
  never join ends the run the same way;
- preemption (``preemption.py``): SIGTERM/SIGUSR1 during fit make every process finish the same
  step (agreed by ``stop_agreement.py``), save, and exit with status 75;
- why a start is a restart (an elastic restart, a SLURM requeue, a preempted run's checkpoint),
  so that ``fit`` resumes by itself.

>>> supervision = Supervision()
>>> supervision.set_watchdog_timeout(120)
>>> with supervision.watching(processes=1):
...     supervision.step_done()
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, NoReturn

from trainmesh.launchers.base import ProcessInfo
from trainmesh.supervision import departures
from trainmesh.supervision.preemption import SignalStop, preemption_checkpoints, restart_reason
from trainmesh.supervision.watchdog import AUTO, StepWatchdog


class Supervision:
    """Watchdog, stop agreement and preemption of one run (see the module's docstring)."""

    def __init__(self) -> None:
        self._watchdog = StepWatchdog(AUTO)
        self._signals = SignalStop()

    # ---- the stuck-rank watchdog ----------------------------------------------------------------
    def set_watchdog_timeout(self, timeout: Any) -> None:
        """``Trainer(watchdog_timeout=...)``: seconds (checked, with an error that says how to
        give it), None to turn the watchdog off, or ``"auto"`` (armed where there are several processes)."""
        self._watchdog = StepWatchdog(timeout)

    @property
    def watchdog_timeout(self) -> float | None:
        return self._watchdog.timeout

    @contextlib.contextmanager
    def watching(self, *, processes: int) -> Iterator[None]:
        """Watch the calling thread's training loop while the block runs (``processes``: the run's
        world size; on one, the default timeout does not arm)."""
        departures.note_fit_ended(stopped_at="")  # (a fit that fails names no earlier fit's stop)
        self._watchdog.start(processes=processes)
        try:
            yield
        finally:
            self._watchdog.stop()

    def watch_departures(self) -> None:
        """Arm the watchdog outside ``fit`` for this process's current process group (once per
        group; ``departures.py``): a rank waiting in a collective that a rank which has left will
        never join ends the run. Called once the process group exists."""
        departures.watch_departures(self._watchdog.timeout)

    @property
    def step_done(self) -> Callable[[], None]:
        """Call after each training or evaluation step (a clock read: the hot path's only cost).
        The watchdog's own ``feed``, so that a loop holding it makes one call per step."""
        return self._watchdog.feed

    def paused(self) -> AbstractContextManager[None]:
        """Stop the watchdog's clock for work that may legitimately take long (a checkpoint save)."""
        return self._watchdog.paused()

    # ---- preemption -----------------------------------------------------------------------------
    def stop_signals(
        self, process: ProcessInfo, *, folder: str, name: str, save: Callable[[str], None]
    ) -> AbstractContextManager[None]:
        """During the block, SIGTERM/SIGUSR1 only set a flag; on a stop, ``save(path)`` writes
        ``<folder>/<name>`` (a collective; ``name``: the program's own, run_identity.preemption_name)
        before the run exits with status 75."""
        return self._signals.armed(process, folder=folder, name=name, save=save)

    @property
    def received_sigterm(self) -> bool:
        """Whether this fit received SIGTERM (it then stops, saves and exits with status 75)."""
        return self._signals.received_sigterm

    @property
    def stop_agreed(self) -> Callable[[], bool]:
        """Call after a step: whether every process stops now (the same answer on each one).
        The signal watch's own method, so that a loop holding it makes one call per step."""
        return self._signals.stop_agreed

    def save_and_exit(self, *, step: int, epoch: int) -> NoReturn:
        """Save the training state as it is after this step, report, and raise ``Preempted``."""
        self._signals.save_and_exit(step=step, epoch=epoch)

    def finish_fit(self, *, step: int, epoch: int, owned: Callable[[str], bool] | None = None) -> None:
        """After the loop: a late signal still saves and exits; else the preemption checkpoint goes
        (where ``owned`` says it is this program's)."""
        self._signals.finish_fit(step=step, epoch=epoch, owned=owned)

    def fit_ended(self, *, stopped_at: str) -> None:
        """A fit's loop is over; ``stopped_at``: where ``trainer.should_stop`` that ended it was set ("" when
        it was not): a rank waiting for this one in the fit's collectives is told so (departure_report.py)."""
        departures.note_fit_ended(stopped_at=stopped_at)
        self._watchdog.stopped_at = stopped_at

    def restart_reason(self, folder: str, name: str) -> str | None:
        """Why this process resumes (this process's answer; the caller agrees across ranks), or None;
        ``name``: the program's preemption checkpoint in ``folder``."""
        return restart_reason(folder, name)

    def preemption_checkpoints(self, folder: str, name: str) -> list[str]:
        """Where the program's preemption checkpoint may be: its own name, then the previous release's."""
        return preemption_checkpoints(folder, name)
