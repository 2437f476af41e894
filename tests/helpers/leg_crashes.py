"""A process of a batched launch (helpers/batches.py) that died by a fatal signal: which leg, which
process, which signal, and what every thread of it was doing.

Each leg's processes run with faulthandler on (``batches._run_legs``), and torch's own handler before
it (``torch._C._set_print_stack_traces_on_fatal_signal``, as torch's distributed tests run), writing to
file descriptor 2, which is the leg's own ``LOG.stderr-RANK`` while the leg runs: a native crash leaves
every thread's native stack, then "Fatal Python error: Segmentation fault" and every Python thread's
stack there. Where a process
died without writing it (a signal faulthandler does not catch), the launch's stderr names the signal
(torch's spawn: "process 3 terminated with signal SIGSEGV") and the crashed leg is the last one that
started.

Why: CPU gloo's point-to-point path under torch.distributed.pipelining crashed a pipelined leg with
SIGSEGV once in a loaded CI run, and every later leg of that launch then failed with gloo's
"Connection closed by peer", the crash itself named nowhere (docs/how-to/troubleshooting.md,
"A worker died by a signal").
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

# faulthandler's first line, by signal (SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE: the native crashes).
_DUMPED = re.compile(
    r"Fatal Python error: (Segmentation fault|Bus error|Aborted|Illegal instruction|Floating[- ]point exception)"
)
# torch's spawn ("process 3 terminated with signal SIGSEGV"), torch's elastic agent ("Signal 11
# (SIGSEGV) received") and trainmesh's ("worker rank 3 died by SIGSEGV").
_SIGNALLED = re.compile(r"(?:terminated with signal |Signal \d+ \(|died by )(SIG(?:SEGV|BUS|ABRT|ILL|FPE))")
# torch's handler (c10's FatalSignalHandler), before faulthandler's: one native stack per thread.
_NATIVE = re.compile(r"^SIG[A-Z]+\(\d+\), PID: \d+, Thread \d+: *$", re.MULTILINE)
_NAMES = {
    "Segmentation fault": "SIGSEGV",
    "Bus error": "SIGBUS",
    "Aborted": "SIGABRT",
    "Illegal instruction": "SIGILL",
    "Floating-point exception": "SIGFPE",
    "Floating point exception": "SIGFPE",
}


@dataclasses.dataclass(frozen=True)
class Crash:
    leg: int  # index of the crashed leg in its launch
    name: str  # its name in the plan
    rank: str  # the process that died ("?" where only the launch's stderr names the signal)
    signal: str  # e.g. "SIGSEGV"
    dump: str  # faulthandler's report (every thread's Python stack), or the launch's stderr

    def describe(self) -> str:
        return (
            f"{'a process' if self.rank == '?' else f'process {self.rank}'} of the launch died by {self.signal} during leg {self.name}: a native crash "
            f"(torch, gloo), not a Python error of the leg. Its report:\n{self.dump}"
        )


def fatal_signal(text: str) -> tuple[str, str] | None:
    """(signal, report) of a process's death by a fatal signal that ``text`` (stderr) tells of, or None."""
    signalled = _SIGNALLED.search(text)
    return _dumped(text) or ((signalled.group(1), text[-3000:]) if signalled else None)


def _dumped(text: str) -> tuple[str, str] | None:
    """faulthandler's report (every Python thread's stack), after the crashing thread's native stack
    where torch's handler printed it (the other threads' are in the file, not the message)."""
    found = _DUMPED.search(text)
    if found is None:
        return None
    starts = [m.start() for m in _NATIVE.finditer(text, 0, found.start())] + [found.start()]
    crashed = [text[a:b] for a, b in zip(starts, starts[1:]) if "fatalSignalHandler" in text[a:b]]
    return _NAMES[found.group(1)], "".join(crashed)[-4000:] + text[found.start() :][-6000:]


def find_crash(names: list[str], logs: list[Path], launch_stderr: str) -> Crash | None:
    """The first leg of the launch in which a process died by a fatal signal, or None."""
    for index, (name, log) in enumerate(zip(names, logs)):
        for path in sorted(log.parent.glob(f"{log.name}.stderr-*")):
            said = _dumped(path.read_text(errors="replace"))
            if said is not None:
                signal, report = said
                return Crash(index, name, path.name.rsplit("-", 1)[1], signal, f"{report}\n(all of it: {path})")
    said = fatal_signal(launch_stderr)
    if said is None:
        return None
    started = [i for i, log in enumerate(logs) if any(log.parent.glob(f"{log.name}.stderr-*"))]
    return crash_at(started[-1] if started else 0, names, launch_stderr, said)


def crash_at(index: int, names: list[str], launch_stderr: str, said: tuple[str, str]) -> Crash:
    """The crash ``fatal_signal`` found in a launch's stderr, in leg ``index`` (the one that ran)."""
    rank = re.search(r"process (\d+) terminated|worker rank (\d+) died", launch_stderr)
    return Crash(index, names[index], (rank.group(1) or rank.group(2)) if rank else "?", *said)
