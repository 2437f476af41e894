"""``python PROGRAM ARGS`` as a fork of this process: a process of its own that starts with
torch and trainmesh already imported.

A test's program run as a new interpreter spends 2-3 s of CPU importing torch and trainmesh
before its first line (more than most legs' training). A fork of the test process (pytest, which
imported both) skips that; it is still a separate process: its own environment, working
directory, stdout/stderr, exit status, and nothing it does reaches the test's process. A
multi-process program forked this way is its elastic agent, as ``python PROGRAM`` would be: the
workers it starts are new interpreters running PROGRAM, as under torchrun.

Not for a test about how processes start, import or exit (those run the real interpreter), nor
while this process holds a process group (the fork would inherit it): ``can_fork()`` says.
"""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path


def can_fork() -> bool:
    """Whether a fork of this process would start clean: no process group of torch.distributed
    (its store connection would be shared with the fork)."""
    import torch.distributed as dist

    return os.name == "posix" and not (dist.is_available() and dist.is_initialized())


def run_forked(
    program: Path, args: list[str], *, env: dict[str, str], timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """As ``subprocess.run([sys.executable, PROGRAM, *ARGS], env=env, cwd=cwd, capture_output=True,
    text=True, timeout=timeout)`` with the program in a new session: on timeout the session
    (its workers included) is killed and TimeoutExpired raised."""
    command = [sys.executable, str(program), *args]
    with tempfile.TemporaryDirectory(prefix="forked-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            _child(program, args, env, cwd, out, err)
        deadline, status = time.monotonic() + timeout, None
        try:
            while status is None and time.monotonic() <= deadline:
                done, waited = os.waitpid(pid, os.WNOHANG)
                status = waited if done else time.sleep(0.05)
        finally:
            if status is None:  # timed out, or the test itself was stopped: no worker outlives it
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:  # killed before its setsid: no group of its own yet
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        if status is None:
            raise subprocess.TimeoutExpired(command, timeout, out.read_text(), err.read_text())
        return subprocess.CompletedProcess(command, os.waitstatus_to_exitcode(status), out.read_text(), err.read_text())


def _child(program: Path, args: list[str], env: dict[str, str], cwd: Path | None, out: Path, err: Path) -> None:
    code = 1
    try:
        os.setsid()  # its own session, as start_new_session=True: killed as a group on timeout
        for fd, path in ((1, out), (2, err)):
            opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # not pytest's capture
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(env)
        if "torch" in sys.modules and env.get("OMP_NUM_THREADS", "").isdigit():
            # A new interpreter's torch reads its thread count from the environment at import.
            sys.modules["torch"].set_num_threads(int(env["OMP_NUM_THREADS"]))
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = [str(program), *args]
        sys.path.insert(0, str(Path(program).parent))  # as the interpreter does for a script
        runpy.run_path(str(program), run_name="__main__")
        code = 0
    except SystemExit as exit_:
        if isinstance(exit_.code, int) or exit_.code is None:
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)  # none of the test process's exit handlers
