"""``ddp``'s launcher: re-run this script once per device through PyTorch's elastic agent.

This is what ``torchrun --nproc-per-node N script.py`` does, started from inside the script:
the first process becomes the agent, which starts the workers, watches them, stops them all
when one fails (and, with ``max_restarts``, starts them again: they resume from the newest
complete checkpoint), passes SIGTERM and SIGUSR1 on to them (they save, see
``supervision/preemption.py``), and exits with a status of ``exit_status``. Under torchrun or
SLURM the processes already exist and the launcher only reads where this one sits.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
import uuid
import warnings
from collections.abc import Callable
from typing import Any

from trainmesh.launchers.agent_link import AGENT_VARIABLE, die_with_agent, own_agent_run_id, take_preemption_report
from trainmesh.launchers.agent_versions import hand_versions_to_workers
from trainmesh.launchers.base import ProcessInfo
from trainmesh.launchers.environments import (
    already_started,
    check_port_free,
    find_free_port,
    planned_process,
    set_worker_environment,
)
from trainmesh.launchers.failure_report import stopped_by_signal, workers_failed


class ElasticLauncher:
    # Lightning's launcher property (its _SubprocessScriptLauncher's): a script's processes, not a notebook's
    is_interactive_compatible = False

    def __init__(
        self, *, devices: int, num_nodes: int, max_restarts: int = 0, environment: dict[str, str] | None = None
    ) -> None:
        self.devices, self.num_nodes, self.max_restarts = devices, num_nodes, max_restarts
        self.environment = dict(environment or {})
        self._process: ProcessInfo | None = None

    def process_info(self) -> ProcessInfo:
        process = self._find_process()
        if process is None:
            raise RuntimeError(
                f"this Runtime runs {self.devices * self.num_nodes} processes (devices={self.devices}, "
                f"num_nodes={self.num_nodes}) and starts them in runtime.launch(fn), which has not run: "
                "call the training code as runtime.launch(train) (see docs/concepts/runtime-vs-trainer.md, 'Your own loop'), or start "
                "the script with torchrun, which makes the processes itself"
            )
        return process

    def planned_process(self) -> ProcessInfo:
        return self._process or planned_process(devices=self.devices, num_nodes=self.num_nodes)

    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._find_process() is not None:
            return _run_recording_errors(fn, *args, **kwargs)
        set_worker_environment(self.environment)  # the workers inherit this process's environment
        hand_versions_to_workers()  # the log folders this process's loggers took before fit: theirs too
        run_agent(script_command(), devices=self.devices, num_nodes=self.num_nodes, max_restarts=self.max_restarts)
        raise SystemExit(0)  # the workers ran the whole script; this process has nothing left to do

    def _find_process(self) -> ProcessInfo | None:
        """This process's place when it is one of the run's (torchrun, SLURM, an existing group,
        or a run of one process); None when launch() must start the processes."""
        if self._process is None:
            self._process = already_started(devices=self.devices, num_nodes=self.num_nodes)
            if self._process is not None:
                die_with_agent()
                _check_restart_settings(self._process, self.max_restarts)
        if self._process is None and self.devices * self.num_nodes == 1:
            self._process = ProcessInfo(master_port=find_free_port())
        return self._process


def _check_restart_settings(process: ProcessInfo, max_restarts: int) -> None:
    """Warn (rank 0) where restarts are torchrun's business, or would fail as torchrun is set up."""
    if not process.is_global_zero:
        return
    if max_restarts > 0 and own_agent_run_id() is None:
        warnings.warn(
            f"Trainer(max_restarts={max_restarts}) does nothing here: torchrun or SLURM started these processes, "
            "and restarting them is its job (torchrun --max-restarts N, with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "
            "in its environment; SLURM: requeue). Drop max_restarts, or start the script with python",
            UserWarning,
            stacklevel=4,
        )
    torchrun_restarts = os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")
    if (
        torchrun_restarts.isdigit()
        and int(torchrun_restarts) > 0
        and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    ):
        warnings.warn(
            f"torchrun --max-restarts {torchrun_restarts} shares its rendezvous store with the workers, and a "
            "restart then often fails or hangs forming the process group (pytorch/pytorch#135712); start torchrun with "
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in its environment",
            UserWarning,
            stacklevel=4,
        )


def script_command() -> list[str]:
    """The arguments that re-run this program: a script path or ``-m module``, then its args."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name not in ("__main__", None):
        module = spec.name[: -len(".__main__")] if spec.name.endswith(".__main__") else spec.name
        return ["-m", module, *sys.argv[1:]]
    script = sys.argv[0] if sys.argv else ""
    started_from = getattr(main, "__file__", None)  # absolute since Python 3.9
    if not hasattr(sys, "ps1") and script not in ("", "-c") and not os.path.isfile(script) and started_from:
        raise ValueError(
            f"strategy='ddp' starts its workers by running this program again ({script!r}), but {script!r} is not "
            f"found from the working directory {os.getcwd()!r}: the program changed directory (os.chdir) after "
            "it started. Start it by its absolute path, e.g. python "
            f"{started_from}, or change directory after fit; or use strategy='ddp_fork' or 'ddp_spawn'"
        )
    if hasattr(sys, "ps1") or script in ("", "-c") or not os.path.isfile(script):
        raise ValueError(
            "strategy='ddp' starts its workers by running this program again, but this is an "
            "interactive session (notebook, REPL or python -c) with no script to re-run; use "
            "strategy='ddp_fork' (notebooks, CPU) or 'ddp_spawn', or put the code in a script"
        )
    return [script, *sys.argv[1:]]


def run_agent(command: list[str], *, devices: int, num_nodes: int, max_restarts: int = 0) -> None:
    """Start ``devices`` workers on this node (of ``num_nodes``) and wait for them; on a failure,
    stop them all and start them again, up to ``max_restarts`` times (each start resumes from
    the newest complete checkpoint). Ends the process with a status of ``exit_status``."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    config = _launch_config(devices=devices, num_nodes=num_nodes, max_restarts=max_restarts)
    # This process exits when the workers are done. Its last act would be Python's final garbage
    # collections over every object torch and the script made (0.3-1.5 s of the run's wall
    # time, as long as the workers' start); frozen objects are skipped by them, and are still
    # freed by reference counting as the modules are cleared (a finalizer is not promised to
    # objects alive at exit anyway). At exit, not now: a script that catches the SystemExit
    # goes on with collection as usual. Once, however many runs this process starts.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    try:
        elastic_launch(config, entrypoint=sys.executable)(*command)
    except SignalException as signal_:
        # SIGTERM, SIGUSR1, Ctrl-C...: torch's agent has sent the same signal to every worker
        # and waited for them (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, 30 s, then SIGKILL).
        raise SystemExit(stopped_by_signal(signal_.sigval, config.run_id)) from None
    except ChildFailedError as failure:
        raise SystemExit(workers_failed(failure, config.run_id, max_restarts)) from None
    finally:
        take_preemption_report(config.run_id)  # never leave the file behind


def _launch_config(*, devices: int, num_nodes: int, max_restarts: int) -> Any:
    from torch.distributed.launcher.api import LaunchConfig

    if num_nodes == 1:
        # A private rendezvous on this machine, on MASTER_PORT when the user chose one.
        port = int(os.environ.get("MASTER_PORT") or find_free_port())
        check_port_free("127.0.0.1", port)
        endpoint = f"127.0.0.1:{port}"
        if max_restarts > 0:
            # As torchrun --standalone: c10d's rendezvous, the one that can give each attempt a
            # store of its own (TORCH_DISABLE_SHARE_RDZV_TCP_STORE, below).
            backend, configs = "c10d", {}
        else:
            # As torchrun --nproc-per-node N: the agent hosts a TCPStore that the workers join.
            # c10d's dynamic rendezvous would add 0.3-0.8 s to the start (a random delay of up
            # to 0.3 s, several rounds with the store, a closing round) for membership changes
            # that one node with no restarts never has.
            backend, configs = "static", {"rank": 0}
    else:
        backend, endpoint, configs = "static", _multi_node_endpoint(), {"rank": _node_rank()}
    run_id = f"trainmesh-{uuid.uuid4().hex[:8]}"
    # The workers check that this process is still their parent (die_with_agent); torch does
    # not tell them its pid.
    os.environ[AGENT_VARIABLE] = f"{os.getpid()} {run_id}"
    # Lightning's ddp launcher tells the processes it starts their node (NODE_RANK), and programs read it.
    os.environ.setdefault("NODE_RANK", "0" if num_nodes == 1 else str(_node_rank()))
    # Two workers on a few cores should not each start a thread per core.
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // devices)))
    if max_restarts > 0:
        # With the rendezvous store shared between agent and workers (torch's default), the
        # workers of a restart often meet stale keys of the attempt before and fail to form
        # their group (pytorch/pytorch#135712): give each attempt a store of its own.
        os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return LaunchConfig(
        min_nodes=num_nodes,
        max_nodes=num_nodes,
        nproc_per_node=devices,
        run_id=run_id,
        rdzv_backend=backend,
        rdzv_endpoint=endpoint,
        rdzv_configs=configs,
        max_restarts=max_restarts,
        monitor_interval=0.1,
        # SLURM's --signal=USR1@SECONDS asks for a save (and a requeue) before the time limit:
        # the agent passes it on to the workers as it does SIGTERM, instead of dying of it.
        signals_to_handle="SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
    )


def _multi_node_endpoint() -> str:
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        raise ValueError(
            "num_nodes > 1 outside torchrun and SLURM needs MASTER_ADDR and MASTER_PORT (node 0's "
            "address and a free port) and NODE_RANK on every node; or start the script with torchrun "
            "--nnodes, or from an sbatch script with srun"
        )
    if _node_rank() == 0:
        check_port_free("0.0.0.0", int(port))
    return f"{addr}:{port}"


def _node_rank() -> int:
    value = os.environ.get("NODE_RANK")
    if value is None or not value.isdigit():
        raise ValueError("num_nodes > 1 without torchrun or SLURM needs NODE_RANK (0 on the first node, 1, ...)")
    return int(value)


def _run_recording_errors(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn``; under an elastic agent, hand a failure's traceback to the agent's error file."""
    if "TORCHELASTIC_ERROR_FILE" not in os.environ:
        return fn(*args, **kwargs)
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        # Whole or not at all: when every rank raises at once, the agent's SIGTERM to the others can
        # come while this rank writes its record, and torch's agent fails on a cut JSON file
        # (JSONDecodeError in ProcessFailure) instead of naming the failure. The signal waits
        # until the file is written (a few milliseconds), then ends the process as before.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            ErrorHandler().record_exception(exc)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        raise
