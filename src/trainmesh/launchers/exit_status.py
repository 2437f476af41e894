"""The exit statuses of a trainmesh run, one meaning each, so that a scheduler's script can act on them.

=======  ==========================================================================================
status   meaning
=======  ==========================================================================================
0        the program finished
1        a worker raised an exception (its traceback is printed); a worker's own ``sys.exit(n)``
         gives ``n``
75       preempted: SIGTERM or SIGUSR1 stopped training after the same step on every process, and
         the checkpoint was saved; run the same command again to resume from it (``EX_TEMPFAIL``
         in ``<sysexits.h>``: a temporary failure, worth retrying)
124      stopped by the watchdog: no step completed on some rank for ``Trainer(watchdog_timeout=)``
         seconds, or (outside ``fit`` too) a rank waited that long in a collective that a rank
         which had left the process group would never join; the message names the ranks and
         where each one was (the status ``timeout(1)`` uses)
130      stopped with Ctrl-C (SIGINT)
128 + N  killed by signal N before a checkpoint was saved: 143 = SIGTERM outside ``fit`` or past
         the grace period, 137 = SIGKILL (the out-of-memory killer, ``kill -9``, a scheduler's
         last resort), 139 = SIGSEGV (a native crash inside the worker: see ``crashed_inside``)
=======  ==========================================================================================

>>> killed_by_signal(15)
143
"""

from __future__ import annotations

import signal

PREEMPTED = 75
STALLED = 124
INTERRUPTED = 130


def killed_by_signal(signum: int) -> int:
    """The shell's status for a process that signal ``signum`` ended: 128 + N."""
    return 128 + signum


def crashed_inside(signum: int) -> bool:
    """Whether signal ``signum`` is one a process's own native code raises when it crashes (SIGSEGV,
    SIGBUS, SIGABRT, SIGILL, SIGFPE), rather than one sent from outside (SIGKILL, SIGTERM)."""
    return signum in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE)


def describe_signal(signum: int) -> str:
    """``"SIGTERM"`` for 15; ``"signal 99"`` for a number with no name here."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
