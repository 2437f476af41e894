"""``ddp_spawn`` / ``ddp_fork``: start the workers with ``torch.multiprocessing`` and bring
rank 0's result back to this process."""

from __future__ import annotations

import gc
import os
import pickle
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from trainmesh.launchers.base import ProcessInfo
from trainmesh.launchers.environments import already_started, find_free_port, planned_process, set_worker_environment
from trainmesh.seed import capture_rng_state, restore_rng_state


class SpawnLauncher:
    def __init__(
        self, *, devices: int, num_nodes: int, start_method: str = "spawn", environment: dict[str, str] | None = None
    ) -> None:
        if start_method not in ("spawn", "fork", "forkserver"):
            raise ValueError(f"start_method={start_method!r}; use 'spawn', 'fork' or 'forkserver'")
        if num_nodes != 1:
            raise ValueError(
                f"ddp_{start_method} starts processes on this machine only, but num_nodes={num_nodes}; "
                "use strategy='ddp' with torchrun or SLURM for several nodes"
            )
        self.devices, self.num_nodes, self.start_method = devices, num_nodes, start_method
        self.environment = dict(environment or {})
        self._process: ProcessInfo | None = None

    @property
    def is_interactive_compatible(self) -> bool:
        """Lightning's ``_MultiProcessingLauncher``'s: forked workers run from a notebook, spawned ones do not."""
        return self.start_method == "fork"

    def process_info(self) -> ProcessInfo:
        if self._process is None:
            # A second launcher in a worker (the user's module-level Runtime, built again when
            # the worker imports the script) joins the group that launch() made, as under torchrun.
            self._process = already_started(devices=self.devices, num_nodes=self.num_nodes)
        if self._process is None:
            raise RuntimeError(
                f"this Runtime (strategy 'ddp_{self.start_method}', devices={self.devices}) starts its processes "
                "in runtime.launch(fn), and this process is not one of them: call the training code as "
                "runtime.launch(train) (see docs/concepts/runtime-vs-trainer.md, 'Your own loop'), or start the script with torchrun, "
                "which makes the processes itself"
            )
        return self._process

    def planned_process(self) -> ProcessInfo:
        return self._process or planned_process(devices=self.devices, num_nodes=self.num_nodes)

    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._process is None:
            self._process = already_started(devices=self.devices, num_nodes=self.num_nodes)
        if self._process is not None:
            return fn(*args, **kwargs)  # torchrun/SLURM already started one process per device
        import torch.multiprocessing as mp

        set_worker_environment(self.environment)  # the workers inherit this process's environment

        payload: Any = (self, fn, args, kwargs)
        if self.start_method != "fork":
            check_picklable({"function": fn, "arguments": args, "keyword arguments": kwargs})
            # Plain pickle bytes: torch's process pickler would put every tensor (the model's
            # parameters!) in memory shared by all workers, and each rank's optimizer would
            # then step the same weights.
            payload = pickle.dumps(payload)
        template = ProcessInfo(
            world_size=self.devices, local_world_size=self.devices, master_port=find_free_port(), reports_to_parent=True
        )
        # A spawned interpreter starts with fresh generators, so a seed_everything() in this
        # process would not reach the workers: they start from this process's RNG state, where a
        # ddp worker (which ran the script up to here itself) would be.
        rng = pickle.dumps(capture_rng_state())
        results = mp.get_context(self.start_method).SimpleQueue()
        if self.start_method == "fork":
            # Garbage this process has not collected yet would otherwise be collected in each forked
            # worker, whose finalizers then run without the threads they wait for: an earlier run's
            # torchft Manager, dropped in a worker, waited forever on its Rust threads (seen in the suite).
            gc.collect()
        workers = mp.start_processes(
            _worker,
            args=(payload, template, results, rng),
            nprocs=self.devices,
            join=False,
            start_method=self.start_method,
        )
        # Read rank 0's result while waiting: a result larger than the pipe's buffer would
        # otherwise block rank 0 in put() while this process blocks in join().
        received = None
        while not workers.join(timeout=0.05):  # raises, and stops every worker, if one fails
            while not results.empty():
                received = results.get()
        while not results.empty():
            received = results.get()
        return pickle.loads(received) if received is not None else None


def _worker(local_rank: int, payload: Any, template: ProcessInfo, results: Any, rng: bytes) -> None:
    launcher, fn, args, kwargs = pickle.loads(payload) if isinstance(payload, bytes) else payload
    process = replace(template, global_rank=local_rank, local_rank=local_rank)
    limit_threads(launcher.start_method, workers=process.local_world_size)
    # What torchrun tells its workers: code with no runtime to ask (rank_zero_only, a user's
    # own `if os.environ["RANK"] == "0"`) reads its place from these.
    os.environ.update(torchrun_variables(process))
    launcher._process = process
    restore_rng_state(pickle.loads(rng))
    result = fn(*args, **kwargs)
    if local_rank == 0:
        # Plain pickle bytes: torch's queue pickler would share tensors through this process's
        # file descriptors, which are gone once it exits, before the parent reads them.
        results.put(pickle.dumps(result))


def limit_threads(start_method: str, *, workers: int) -> None:
    """Give each of ``workers`` processes its share of the cores, as the elastic launcher does."""
    import torch

    if start_method == "fork":
        # A forked child inherits the parent's OpenMP thread-pool state but not its threads: the
        # first multi-threaded kernel waits forever for them (checked, torch 2.13: a fork child
        # with 2 threads hangs in a matmul once the parent ran one; with 1 it does not).
        torch.set_num_threads(1)
    elif "OMP_NUM_THREADS" not in os.environ:  # the user's choice, read by torch at start, wins
        # Workers that each start a thread per core oversubscribe them: 2 workers x 2 threads
        # on 2 cores ran about 7x slower than with 1 thread each.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def torchrun_variables(process: ProcessInfo) -> dict[str, str]:
    """The environment variables torchrun sets for a worker at ``process`` (one node)."""
    return {
        "RANK": str(process.global_rank),
        "LOCAL_RANK": str(process.local_rank),
        "WORLD_SIZE": str(process.world_size),
        "LOCAL_WORLD_SIZE": str(process.local_world_size),
        "GROUP_RANK": str(process.node_rank),
    }


class RefusedToTravel(ValueError):
    """An object's own refusal, raised while it is pickled, to be sent to a spawned process (trainmesh.keras'
    model: Keras cannot rebuild it there). Its message says what, why and what to use instead: it reaches the
    program as it is, without the generic advice below (``setup()`` is the Trainer's)."""


def check_picklable(objects: dict[str, Any]) -> None:
    """Name the attribute that cannot travel to a spawned process, before any process starts."""
    for label, obj in objects.items():
        try:
            pickle.dumps(obj)
        except RefusedToTravel:
            raise
        except Exception as err:  # pickle raises several types (PicklingError, TypeError, AttributeError)
            path = _find_unpicklable(obj, label, depth=4) or label
            raise ValueError(
                f"ddp_spawn must send the model, data and callbacks to new processes by pickling, but "
                f"{path} cannot be pickled ({type(err).__name__}: {err}). Make it picklable (e.g. build "
                "it in setup()), or use strategy='ddp', which re-runs the script instead of pickling"
            ) from None


def _find_unpicklable(obj: Any, path: str, depth: int) -> str | None:
    """The deepest attribute path (``DropoutNet.loss_fn``) under ``obj`` that fails to pickle."""
    children: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        children = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple)):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    elif hasattr(obj, "__self__") and hasattr(obj, "__func__"):  # a bound method: look at its object
        children = [(type(obj.__self__).__name__, obj.__self__)]
    elif hasattr(obj, "__dict__"):
        state = obj.__getstate__() if hasattr(obj, "__getstate__") else vars(obj)
        if isinstance(state, dict):
            # nn.Module keeps submodules in _modules: name them as attributes, as users wrote them.
            flat = {**state.get("_modules", {}), **{k: v for k, v in state.items() if k != "_modules"}}
            children = [(f"{path}.{k}", v) for k, v in flat.items()]
    if depth == 0:
        return None
    for child_path, child in children:
        try:
            pickle.dumps(child)
        except Exception:
            if not isinstance(child, (dict, list, tuple)) and hasattr(child, "__dict__") and "[" in child_path:
                child_path = type(child).__name__  # start a readable path at the object's class
            return _find_unpicklable(child, child_path, depth - 1) or child_path
    return None


def set_torchrun_environment(process: ProcessInfo) -> None:
    """Make this process look started by torchrun at ``process``, so a Runtime of any strategy
    joins its group instead of launching (used by ``trainmesh scale``'s workers)."""
    os.environ.update(
        torchrun_variables(process), MASTER_ADDR=process.master_addr, MASTER_PORT=str(process.master_port)
    )
