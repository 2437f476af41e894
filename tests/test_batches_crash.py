"""A batched launch (helpers/batches.py) whose process dies by a fatal signal: the crash is named
(leg, process, signal, every thread's Python stack) in a warning, never hidden, and the crashed
leg and those after it run once more; a leg that crashes again fails with that report rather than
with a peer's broken connection. Why: helpers/leg_crashes.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers.batches import Batches, LegCrashed, LegFailed  # noqa: E402
from helpers.leg_crashes import fatal_signal  # noqa: E402

PROGRAM = Path(__file__).parent / "batches_crash_run.py"


def _attempts(root: Path, name: str) -> int:
    path = root / f"{name}.attempts"
    return path.read_text().count("\n") if path.exists() else 0


def test_a_leg_whose_process_dies_by_a_signal_is_named_and_runs_once_more(tmp_path):
    def leg(name: str, *argv: str) -> tuple:
        return name, 1, [argv[0], str(tmp_path / name), *argv[1:]], {}

    # One launch; its rerun (from flaky on) is the last: broken's crash there fails it.
    plan = [
        leg("before", "ok"),
        leg("flaky", "segv", "once"),
        leg("after", "ok"),
        leg("broken", "segv"),
        leg("later", "ok"),
    ]
    batches = Batches(PROGRAM, tmp_path, plan, leg_timeout=60)

    with pytest.warns(LegCrashed) as said:
        with pytest.raises(LegFailed, match="process 0 of the launch died by SIGSEGV during leg broken") as failed:
            batches("broken")
    (crash,) = said
    message = str(crash.message)
    assert "process 0 of the launch died by SIGSEGV during leg flaky" in message
    assert "Fatal Python error: Segmentation fault" in message and "in crash_here" in message
    assert "Running flaky and the legs after it again" in message
    assert "in crash_here" in str(failed.value)
    # The leg before the crash ran once; flaky and after again in the second launch, where broken
    # crashed: not run a third time, and the leg after it never ran, and says why.
    attempts = [_attempts(tmp_path, name) for name in ("before", "flaky", "after", "broken", "later")]
    assert attempts == [1, 2, 1, 1, 0]
    assert all(isinstance(batches(name), str) for name in ("before", "flaky", "after"))
    with pytest.raises(LegFailed, match="died by SIGSEGV during leg broken"):
        batches("later")


def test_the_report_keeps_the_crashing_threads_native_stack_and_every_python_stack():
    # As a leg's stderr has it: torch's handler (one native stack per thread, the crashing one's
    # through fatalSignalHandler), then faulthandler's. Abridged from a real crash.
    stderr = (
        "a warning of the leg\n"
        "SIGSEGV(11), PID: 6225, Thread 6225: \n"
        " frame #0: c10::FatalSignalHandler::stacktraceSignalHandler(bool) + 0x8f\n"
        "frame #1: c10::FatalSignalHandler::fatalSignalHandler(int, siginfo_t*) + 0x2da\n"
        "frame #4: gloo::transport::tcp::Pair::read() + 0x1\n\n"
        "SIGSEGV(11), PID: 6225, Thread 6560: \n"
        " frame #0: c10::FatalSignalHandler::stacktraceSignalHandler(bool) + 0x8f\n"
        "frame #3: pthread_cond_wait + 0x1e8\n\n"
        "Fatal Python error: Segmentation fault\n\n"
        "Current thread 0x00007f93d3c73b80 (most recent call first):\n"
        '  File "schedules.py", line 683 in _wait_batch_p2p\n'
    )
    signal, report = fatal_signal(stderr)
    assert signal == "SIGSEGV"
    assert "Thread 6225" in report and "Pair::read" in report and "in _wait_batch_p2p" in report
    assert "Thread 6560" not in report and "a warning of the leg" not in report
    assert fatal_signal("process 3 terminated with signal SIGSEGV")[0] == "SIGSEGV"  # torch's spawn
    assert fatal_signal("worker rank 3 died by SIGBUS (signal 7): a native crash")[0] == "SIGBUS"  # our agent
    assert fatal_signal("process 3 terminated with signal SIGKILL") is None  # a kill, not a crash
