"""Run a test's program as a real process that cannot outlive its test."""

import os
import signal
import subprocess
import sys
from pathlib import Path


def run_program(
    args: list[str], *, timeout: float, env: dict | None = None, without: tuple[str, ...] = (), cwd=None
) -> subprocess.CompletedProcess:
    """``python ARGS`` in its own session, one thread per process unless ``env`` says otherwise,
    with this environment less the ``without`` variables; on timeout the whole session (workers
    included) is killed and TimeoutExpired raised."""
    environment = {k: v for k, v in os.environ.items() if k not in without}
    process = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**environment, "OMP_NUM_THREADS": "1", **(env or {})},
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def run_code_forked(
    code: str, args: list[str], *, timeout: float, cwd: Path, without: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """As ``run_program(["-c", CODE, *ARGS], ...)``, the code run as a fork of the fork server
    (helpers/forked.py: torch and trainmesh already imported) where it can, from a file written
    in ``cwd``: for a program that is an agent or a launcher, not one about how a process starts."""
    from helpers.forked import can_fork, run_forked

    if not can_fork():
        return run_program(["-c", code, *args], timeout=timeout, without=without, cwd=cwd)
    program = Path(cwd, "forked_code.py")
    program.write_text(code)
    environment = {**{k: v for k, v in os.environ.items() if k not in without}, "OMP_NUM_THREADS": "1"}
    return run_forked(program, args, env=environment, timeout=timeout, cwd=cwd)
