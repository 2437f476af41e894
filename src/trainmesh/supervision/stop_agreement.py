"""Agree across processes on the step to stop training after, at almost no cost per step.

A process that got SIGTERM cannot stop alone: the others would wait forever in the next step's
collectives. So the processes exchange their stop requests, with an all_reduce(MAX), and all of
them act on the result after the same step.

An exchange costs little but not nothing (on two busy CPU cores a gloo all_reduce of one number
takes about a millisecond of CPU, a third of a small model's step), so it does not happen at
every step: about every ``EXCHANGE_EVERY_SECONDS`` of training, counted in steps that every
process agrees on (each proposes an interval from its own step time; the smallest wins). And it
never waits: each exchange is started asynchronously and read at the next one, long finished by
then. A request is thus acted on within about two intervals (half a second), plus a step.

The group is a gloo group of its own, made once per fit: CPU tensors whatever the main backend
(NCCL included), and never queued behind the model's gradients.
"""

from __future__ import annotations

import time
from typing import Any

import torch

EXCHANGE_EVERY_SECONDS = 0.25  # of training between two exchanges, about; 0 exchanges after every step
MAX_INTERVAL = 100  # steps: bounds the delay should steps become much slower than when it was agreed


class StopAgreement:
    """Call ``exchange(request)`` after every step on every process (the same number of times);
    it returns the largest request any process made, once agreed (0: none), the same on all."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self._group = dist.new_group(backend="gloo")
        # [request, -proposed interval]: one MAX gives the largest request and the smallest interval.
        self._buffers = (torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64))
        self._turn = 0
        self._in_flight: tuple[Any, torch.Tensor] | None = None
        self._interval, self._steps, self._since = 1, 0, time.monotonic()
        self.agreed = 0

    def exchange(self, request: int) -> int:
        """After a step: on the agreed steps, start an exchange and read the previous one."""
        self._steps += 1
        if self._steps < self._interval:
            return self.agreed
        now = time.monotonic()
        proposal = _interval_for(step_seconds=(now - self._since) / self._steps)
        self._steps, self._since = 0, now
        buffer = self._buffers[self._turn]
        self._turn ^= 1  # the other buffer's exchange has been read: it is free
        buffer[0], buffer[1] = request, -proposal
        work = self._dist.all_reduce(buffer, op=self._dist.ReduceOp.MAX, group=self._group, async_op=True)
        previous, self._in_flight = self._in_flight, (work, buffer)
        if previous is not None:
            self._read(previous)
        return self.agreed

    def settle(self, request: int | None = None) -> int:
        """Read the exchange in flight and, given a ``request``, run one more to the end."""
        if self._in_flight is not None:
            self._read(self._in_flight)
            self._in_flight = None
        if request is not None:
            buffer = self._buffers[0]
            buffer[0], buffer[1] = request, -1
            self._dist.all_reduce(buffer, op=self._dist.ReduceOp.MAX, group=self._group)
            self.agreed = max(self.agreed, int(buffer[0]))
        return self.agreed

    def close(self) -> None:
        # With an exchange in flight (fit failed mid-step) the group stays: the run's failure
        # teardown destroys every group, and waiting here for a peer that died could hang.
        if self._in_flight is None and self._dist.is_initialized():
            self._dist.destroy_process_group(self._group)

    def _read(self, exchange: tuple[Any, torch.Tensor]) -> None:
        work, buffer = exchange
        work.wait()
        self.agreed = max(self.agreed, int(buffer[0]))
        self._interval = -int(buffer[1])  # every process reads the same: the schedule stays common


def _interval_for(*, step_seconds: float) -> int:
    """How many steps make about ``EXCHANGE_EVERY_SECONDS`` at this step time (1 to MAX_INTERVAL).

    >>> EXCHANGE_EVERY_SECONDS, _interval_for(step_seconds=0.01), _interval_for(step_seconds=2.0)
    (0.25, 25, 1)
    """
    if EXCHANGE_EVERY_SECONDS <= 0 or step_seconds <= 0:
        return 1
    return max(1, min(MAX_INTERVAL, int(EXCHANGE_EVERY_SECONDS / step_seconds)))
