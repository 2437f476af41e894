"""Ctrl-C during ``fit`` / ``validate`` / ``test`` / ``predict``, as Lightning 2.6's
``_call_and_handle_interrupt`` handles it on one process: it says "Detected KeyboardInterrupt,
attempting graceful shutdown ...", marks the run INTERRUPTED, calls the callbacks' and the data
module's ``on_exception`` (an ``OnExceptionCheckpoint`` saves there) with a second Ctrl-C ignored
meanwhile, tears the run down with the stage left as it was, and ends the program with
``SystemExit(1)`` (its ``sys.exit(1)``), the KeyboardInterrupt as its context.

Under several processes the KeyboardInterrupt itself goes on up: trainmesh's agent, which got the
signal, stops every worker and exits 130 (launchers/exit_status.py).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from trainmesh.utilities.rank_zero import rank_zero_info


def shut_down_on_interrupt(
    on_exception: Callable[[BaseException], None], world_size: int, exception: KeyboardInterrupt
) -> BaseException:
    """The run's exception hooks (``on_exception``), under Lightning's message; returns what the Trainer raises."""
    rank_zero_info("\nDetected KeyboardInterrupt, attempting graceful shutdown ...")
    with _second_interrupt_ignored():
        on_exception(exception)
    return SystemExit(1) if world_size == 1 else exception


class _second_interrupt_ignored:
    """SIGINT ignored while the exception hooks run (a checkpoint may be saving), as Lightning's;
    the program's handler back after them. Signals can only be set from the main thread."""

    def __enter__(self) -> None:
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def __exit__(self, *exc_info: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
