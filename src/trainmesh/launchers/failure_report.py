"""What trainmesh's elastic agent says when a run ends early, and its exit status: a signal to the
agent (Ctrl-C, SIGTERM: a preemption where the workers saved), or a worker's failure, named by the
worker that caused it (``root_failure``: not a peer that only saw it leave, nor one the agent stopped).
The agent's last words go to stderr; the status is one of ``exit_status``."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from trainmesh.launchers import exit_status
from trainmesh.launchers.agent_link import take_preemption_report


def stopped_by_signal(sig: signal.Signals, run_id: str) -> int:
    """Say how a signal to the agent ended the run; its exit status."""
    report = take_preemption_report(run_id)
    if report is not None:
        _say(f"stopped by {sig.name}: {report}")
        return exit_status.PREEMPTED
    if sig == signal.SIGINT:
        _say("stopped by SIGINT (Ctrl-C); every worker was stopped.")
        return exit_status.INTERRUPTED
    status = exit_status.killed_by_signal(sig.value)
    _say(
        f"stopped by {sig.name}, and every worker with it, before a checkpoint was saved (the workers save "
        f"on SIGTERM/SIGUSR1 only inside fit, within TORCH_ELASTIC_SHUTDOWN_TIMEOUT); exit status {status}."
    )
    return status


def workers_failed(failure: Any, run_id: str, max_restarts: int) -> int:
    """Say how a worker's end ended the run (the one that caused it: see ``root_failure``); the
    run's exit status."""
    rank, error = root_failure(failure)
    again = f", after {max_restarts} restart(s) that failed too" if max_restarts else ""
    if error.exitcode == exit_status.PREEMPTED:
        report = take_preemption_report(run_id) or "their checkpoint is saved"
        _say(f"the workers were preempted (a signal reached them, not this process): {report}")
        return exit_status.PREEMPTED
    if error.exitcode < 0 and not _recorded(error):
        name = exit_status.describe_signal(-error.exitcode)
        status = exit_status.killed_by_signal(-error.exitcode)
        if exit_status.crashed_inside(-error.exitcode):
            why = (
                "a native crash inside the worker (torch, gloo or another C extension), not a Python error; "
                "PYTHONFAULTHANDLER=1 prints every thread's Python stack at the crash"
            )
            _say(
                f"worker rank {rank} died by {name} (signal {-error.exitcode}){again}: {why}; every worker was "
                f"stopped. Exit status {status}."
            )
            return status
        _say(
            f"worker rank {rank} was killed by {name} (signal {-error.exitcode}){again}: its program did not "
            "fail, something outside stopped it (SIGKILL: often the out-of-memory killer; else a scheduler or a "
            f"user); every worker was stopped. Exit status {status}."
        )
        return status
    if error.exitcode < 0:  # it raised, then was stopped while it exited: the agent stops them all
        ended = f"it raised, then {exit_status.describe_signal(-error.exitcode)} ended it as it exited"
    else:
        ended = f"exit code {error.exitcode}"
    _say(f"worker rank {rank} failed ({ended}){again}; every worker was stopped.\n{_failure_text(error)}")
    return error.exitcode if error.exitcode > 0 else 1


# What a collective raises on a rank whose peer left (gloo, NCCL): the rank is a casualty of
# another's failure, not its cause.
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "NCCL communicator was aborted")
_NO_ERROR_FILE = "<N/A>"  # torch's ProcessFailure.error_file when the worker recorded no exception


def root_failure(failure: Any) -> tuple[int, Any]:
    """The worker whose failure ended the run: the first that failed of its own (raised, or exited
    with a status), unless its error only says that a peer left (a rank that raises closes its
    connections, and a peer blocked in a collective may exit first with "Connection closed by
    peer"); else the first killed by a signal; else the first.

    A signal comes after a failure of its own: once one worker fails, torch's agent stops the
    others with SIGTERM, and lists them as failures too. When every rank raises at once, one that
    raised and was still exiting is among them, stamped (as torch stamps every failure) in whole
    seconds: earlier than the rank that ended the run, if it raised in the second before. The error
    files' times (to the nanosecond) order the workers that raised within one second.

    >>> from types import SimpleNamespace as F
    >>> gone = F(timestamp=1, exitcode=1, message={"message": "RuntimeError: Connection closed by peer"})
    >>> cause = F(timestamp=2, exitcode=1, message={"message": "ValueError: boom"})
    >>> stopped = F(timestamp=3, exitcode=-15, message="Signal 15 (SIGTERM) received by PID 7")
    >>> root_failure(F(failures={0: gone, 1: cause, 2: stopped}))[0]
    1
    """

    def order(item: tuple[int, Any]) -> tuple[int, int, float]:
        error = item[1]
        own = error.exitcode > 0 or _recorded(error)
        tier = 2 if any(marker in _failure_text(error) for marker in _PEER_GONE) else 0 if own else 1
        return tier, error.timestamp, _recorded_at(error)

    return min(failure.failures.items(), key=order)  # the first of the lowest: ties keep torch's order


def _recorded(error: Any) -> bool:
    """Whether the worker recorded an exception in its error file (it raised: see _run_recording_errors)."""
    return getattr(error, "error_file", _NO_ERROR_FILE) not in (_NO_ERROR_FILE, "", None)


def _recorded_at(error: Any) -> float:
    """When the worker wrote its error file, in seconds; infinity without one (or once it is gone)."""
    try:
        return os.stat(error.error_file).st_mtime_ns / 1e9 if _recorded(error) else float("inf")
    except OSError:
        return float("inf")


def _failure_text(error: Any) -> str:
    message = error.message
    if isinstance(message, dict):
        message = message.get("message", "")
    return str(message or "its traceback is printed above")


def _say(message: str) -> None:
    print(f"\ntrainmesh: {message}", file=sys.stderr, flush=True)
