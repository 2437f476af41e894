"""``trainer.should_stop`` set on some ranks only: the run ends naming them, before any rank waits for ever.

Lightning 2.6.6 (and 1.9.5) stop each rank by its own flag and define nothing for ranks that disagree: a
rank that stops alone leaves the others in the next step's collectives, which never complete (a hang; under
gloo the stopped rank's exit breaks them with "Connection closed by peer"). Here, where the step watchdog
runs (several processes; ``watchdog_timeout`` not None):

- the loop reports each place where it reads the flag to decide (:meth:`StopCheck.passed`: a counter, and
  nothing else on the hot path while the flag is unset);
- a rank whose flag is set there announces that place in the run's c10d store and waits until every rank
  has announced it (they all stopped: the fit ends as Lightning's) or one has gone on;
- the watchdog thread of a rank that passed that place with its flag unset (its main thread is then in the
  next step's collective) says it went on, and both end the run with the same message: which ranks set the
  flag, where, and what to do instead.
"""

from __future__ import annotations

import contextlib
import sys
import time
from datetime import timedelta
from typing import Any

import torch.distributed as dist

_STORE_TIMEOUT = timedelta(seconds=10)


class ShouldStopOnSomeRanks(RuntimeError):
    """``trainer.should_stop`` was set on some ranks and not on the others at the same point of the fit."""


class StopCheck:
    """One fit's check that the ranks agree on ``trainer.should_stop`` (see the module's docstring).

    >>> check = StopCheck()
    >>> check.passed(False, ""), check.passed(True, "train.py:9"), check.count  # no channel: one process
    (None, None, 2)
    """

    def __init__(self) -> None:
        self.count = 0  # places passed (the watchdog's thread reads it)
        self._store: Any = None  # the training thread's connection
        self._prefix, self._rank, self._world_size = "", 0, 1
        self._announced = 0  # the latest place this rank announced its flag at
        self._agreed = False  # every rank stopped at the latest announced place

    def open(self, *, watch: int) -> None:
        """Check from now on (the step watchdog's start, on several processes)."""
        self.count, self._announced, self._agreed = 0, 0, False
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return
        self._store = dist.distributed_c10d._get_default_store()
        self._prefix = f"trainmesh/should_stop/{watch}/"
        self._rank, self._world_size = dist.get_rank(), dist.get_world_size()

    def close(self) -> None:
        self._store = None

    def passed(self, should_stop: bool, where: str) -> None:
        """The loop reads ``trainer.should_stop`` to decide here (every rank passes the same places in the same
        order); ``where``: the user's line that set it. Raises :class:`ShouldStopOnSomeRanks` where this rank's
        flag is set and another rank went on without it."""
        self.count += 1
        if not should_stop:
            self._agreed = False
            return
        if self._store is None or self._agreed:  # one process, or still set after every rank stopped (min_epochs)
            return
        self._announced = self.count
        self._agreed = self._wait_for_all(self.count, where)

    def _wait_for_all(self, place: int, where: str) -> bool:
        key = f"{self._prefix}{place}/"
        self._store.set(f"{key}set/{self._rank}", where)
        arrived = self._store.add(f"{key}stopping", 1)
        self._store.set(self._prefix + "latest", str(place))
        while arrived < self._world_size:
            if self._store.check([f"{key}went_on"]):
                went_on = [int(rank) for rank in self._store.get(f"{key}went_on").decode().split(",")]
                raise ShouldStopOnSomeRanks(message(self._setters(key), went_on))
            time.sleep(0.02)
            arrived = self._store.add(f"{key}stopping", 0)
        return True

    def _setters(self, key: str, store: Any = None) -> dict[int, str]:
        store = store or self._store
        found = {}
        for rank in range(self._world_size):
            with contextlib.suppress(RuntimeError):
                if store.check([f"{key}set/{rank}"]):
                    found[rank] = store.get(f"{key}set/{rank}").decode()
        return found

    # ---- the watchdog's thread ----------------------------------------------------------------------
    def went_on_message(self, store: Any) -> str | None:
        """Asked by this rank's watchdog thread at each poll (``store``: its own connection): where another
        rank announced a stop at a place this rank passed without one, say so in the store and return the
        message that ends the run; else None (one store call where nothing was announced)."""
        if not self._prefix:
            return None
        try:
            if not store.check([self._prefix + "latest"]):
                return None
            place = int(store.get(self._prefix + "latest"))
        except (RuntimeError, ValueError):
            return None
        if self.count < place or self._announced == place:  # not there yet, or stopping there too
            return None
        key = f"{self._prefix}{place}/"
        with contextlib.suppress(RuntimeError):
            store.set(f"{key}went_on", str(self._rank))
        return message(self._setters(key, store), [self._rank])


def message(setters: dict[int, str], went_on: list[int]) -> str:
    """What ends a run whose ranks disagree on ``trainer.should_stop``.

    >>> print(message({1: "train.py:12 in training_step"}, [0]))  # doctest: +ELLIPSIS
    trainer.should_stop = True was set on rank 1 only (train.py:12 in training_step), while rank 0 went on ...
    """
    ranks = ", ".join(str(rank) for rank in sorted(setters))
    places = "; ".join(
        f"rank {rank}: {where}" if len(setters) > 1 else where for rank, where in sorted(setters.items())
    )
    others = ", ".join(str(rank) for rank in went_on)
    return (
        f"trainer.should_stop = True was set on rank{'s' if len(setters) > 1 else ''} {ranks} only ({places}), while "
        f"rank{'s' if len(went_on) > 1 else ''} {others} went on training: Lightning stops each rank by its own flag, "
        "so a rank that stops alone leaves the others waiting in the next step's collectives for ever. Set it on "
        "every rank alike: decide from values every rank shares (metrics logged with sync_dist=True, or the flag "
        "reduced with trainer.strategy.reduce_boolean_decision(flag, all=False)), or use EarlyStopping, which "
        "reduces its decision across ranks."
    )


def report(text: str) -> None:
    """Print the message on this rank (the watchdog's thread ends the process next)."""
    with contextlib.suppress(Exception):
        print(f"\n{text}", file=sys.stderr, flush=True)
