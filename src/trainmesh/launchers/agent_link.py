"""A worker's ties to trainmesh's own elastic agent, beside what torch's agent passes: the agent's pid
and run id (``AGENT_VARIABLE``), so that a worker dies with its agent (``die_with_agent``), and the
preemption report a worker leaves for the agent to print (``tell_agent_preempted``)."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading

AGENT_VARIABLE = "TRAINMESH_ELASTIC_AGENT"  # "<agent pid> <run id>", set by run_agent for its workers
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_watching_agent = False


def die_with_agent() -> None:
    """In a worker of an elastic agent (ours or torchrun's), die when the agent dies.

    The agent stops its workers when it stops normally, on an error, Ctrl-C or SIGTERM; but
    SIGKILL (the OOM killer, ``kill -9``, a scheduler's last resort) gives it no chance, and its
    workers would live on as orphans: nothing can stop them or hear that they failed any more,
    and they keep training and writing checkpoints over the files of the run that replaces them.
    So on Linux the kernel sends each worker SIGKILL when its parent dies (PR_SET_PDEATHSIG);
    elsewhere a thread watches the parent's pid. PR_SET_PDEATHSIG fires when the *thread* that
    started the worker exits; the elastic agent starts its workers with subprocess from the
    thread that runs it, which lives until the workers are done.
    """
    global _watching_agent
    if _watching_agent or "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    _watching_agent = True
    agent = _agent_pid()
    if not _kill_me_when_parent_dies():
        threading.Thread(target=_watch_parent, args=(agent,), name="trainmesh-agent-watch", daemon=True).start()
    # After asking for the signal, not before: a parent that died in between would never send it.
    if os.getppid() != agent:
        _agent_gone(agent)


def _agent_pid() -> int:
    """The pid of the agent that started this worker: the one trainmesh's agent recorded for
    this run, else (torchrun) this process's parent now."""
    pid, _, run_id = os.environ.get(AGENT_VARIABLE, "").partition(" ")
    if pid.isdigit() and run_id == os.environ.get("TORCHELASTIC_RUN_ID"):
        return int(pid)
    return os.getppid()


def _kill_me_when_parent_dies() -> bool:
    """prctl(PR_SET_PDEATHSIG, SIGKILL) through libc; False where there is no prctl."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        result = libc.prctl(
            PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)
        )
    except (OSError, AttributeError):
        return False
    return result == 0


def _watch_parent(agent: int) -> None:
    while True:
        if os.getppid() != agent:
            _agent_gone(agent)
        threading.Event().wait(1.0)


def _agent_gone(agent: int) -> None:
    try:
        print(
            f"trainmesh: worker {os.getpid()} stops: its elastic agent (pid {agent}) is gone",
            file=sys.stderr,
            flush=True,
        )
    except Exception:  # noqa: BLE001 - the agent may have held the other end of stderr
        pass
    os._exit(1)


def tell_agent_preempted(report: str) -> bool:
    """In a worker of trainmesh's own agent: tell it the run was preempted with its checkpoint
    saved, so that it exits with ``exit_status.PREEMPTED`` rather than as killed by the signal,
    and prints ``report``. (torch's agent reports no exit status of workers it stopped itself.)
    False where no agent of ours reads it (torchrun's agent, SLURM, one process)."""
    run_id = own_agent_run_id()
    if run_id is None:
        return False
    path = _preemption_report_path(run_id)
    with open(f"{path}.{os.getpid()}.tmp", "w") as file:
        file.write(report)
    os.replace(f"{path}.{os.getpid()}.tmp", path)  # the agent never reads half a report
    return True


def own_agent_run_id() -> str | None:
    """The run id of the trainmesh agent that started this worker; None for any other process."""
    run_id = os.environ.get(AGENT_VARIABLE, "").partition(" ")[2]
    return run_id if run_id and run_id == os.environ.get("TORCHELASTIC_RUN_ID") else None


def said_by_the_agent_process() -> bool:
    """Whether a line this process is about to say was said already by the process that started it.

    Under Lightning the process the user starts becomes rank 0; under trainmesh's agent it only waits,
    after running the script up to ``launch()`` / ``fit()``. A rank-0 worker of that agent, before its
    process group is formed, is running that same part of the script again: what it says there (Fabric's
    constructor lines, "Seed set to N") the agent process said, once, as Lightning's rank 0 did.
    """
    import torch.distributed as dist

    from trainmesh.utilities.rank_zero import global_rank_from_env

    formed = dist.is_available() and dist.is_initialized()
    return own_agent_run_id() is not None and not formed and global_rank_from_env() == 0


def take_preemption_report(run_id: str) -> str | None:
    path = _preemption_report_path(run_id)
    try:
        with open(path) as file:
            report = file.read()
        os.remove(path)
    except OSError:
        return None
    return report


def _preemption_report_path(run_id: str) -> str:
    # The workers inherit the agent's environment, so they find the same temporary folder.
    return os.path.join(tempfile.gettempdir(), f"{run_id}.preempted")
