"""Joining and leaving the run's process group (torch.distributed's default group)."""

from __future__ import annotations

import contextlib
import itertools
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from trainmesh.launchers.base import ProcessInfo
from trainmesh.supervision.departures import LEAVE_TIMEOUT, leave_together, stop_watching
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.rank_zero import rank_zero_info

# Lightning's banner of a group it forms comes from lightning.fabric.utilities.distributed (INFO)
_log = lightning_named_logger("trainmesh.utilities.distributed")

# Every process of a run forms its groups in the same order (each fit or launch joins once): the
# count names the store keys of one group. Under an elastic agent (ours, torchrun's) the workers
# share the agent's store, which outlives their groups, and torch writes a group's keys under the
# same names each time ("default_pg/0/..."): a process whose peer had not yet re-joined read the
# peer's address of the group before, already closed, and waited on it until the timeout
# ("connectFullMesh ... Connection refused"), a fit after an earlier fit's failure in one script.
_joins = itertools.count()


# A process waits for every other to join its group as long as Lightning's init_process_group does:
# the group's timeout (30 minutes by default). A shorter wait of our own would end a run Lightning
# completes (rank 0 downloading for 15 minutes before fit while the others wait); what trainmesh adds
# is the ending: the ranks that never came, named, instead of a DistStoreError naming store keys.
class MissingRanks(RuntimeError):
    """Some processes of the run never joined its process group within the group's timeout."""


def join_process_group(
    process: ProcessInfo, device: torch.device, *, backend: str | None, timeout: timedelta, banner: bool = True
) -> bool:
    """Initialise the default process group for ``process``; False when one already exists
    (the user, or a test harness, made it: use it and leave it to them). ``banner``: say Lightning's
    lines as it forms the group (a Keras run says none: Keras prints no such lines)."""
    if dist.is_available() and dist.is_initialized():
        return False
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    # The store torch's tcp:// rendezvous makes (the agent's where there is one, else rank 0's),
    # with this group's keys apart from those of every group before it in this process.
    url = f"tcp://{process.master_addr}:{process.master_port}"
    join = next(_joins)
    # Lightning's _init_dist_connection says this on every rank, at INFO, before it joins
    if banner:
        _log.info(
            f"Initializing distributed: GLOBAL_RANK: {process.global_rank}, MEMBER: {process.global_rank + 1}/{process.world_size}"
        )
    try:  # without an agent's store, rank 0 hosts one and waits for every process to connect
        store, _, _ = next(dist.rendezvous(url, process.global_rank, process.world_size, timeout=timeout))
    except dist.DistStoreError as error:
        raise MissingRanks(_missing_message(process, timeout, None) + f" (torch: {error})") from error
    _arrive_together(dist.PrefixStore(f"trainmesh/join/{join}/", store), process, timeout)
    store.set_timeout(timeout)
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(f"trainmesh/group/{join}/", store),
        rank=process.global_rank,
        world_size=process.world_size,
        timeout=timeout,
    )
    # ...and this once every process has joined, on rank 0 only (its rank_zero_info)
    if banner:
        rank_zero_info(
            f"{'-' * 100}\n"
            f"distributed_backend={backend}\n"
            f"All distributed processes registered. Starting with {process.world_size} processes\n"
            f"{'-' * 100}\n"
        )
    return True


def _arrive_together(store: dist.Store, process: ProcessInfo, wait: timedelta) -> None:
    """Each process marks its arrival and waits, up to ``wait``, for every other's; then says which
    never came (torch's own join would wait the group's whole timeout and name none)."""
    store.set_timeout(wait)
    store.set(f"arrived/{process.global_rank}", "1")
    deadline = time.monotonic() + wait.total_seconds()
    arrived = store.add("arrivals", 1)
    while arrived < process.world_size:
        if time.monotonic() >= deadline:
            missing = [rank for rank in range(process.world_size) if not store.check([f"arrived/{rank}"])]
            raise MissingRanks(_missing_message(process, wait, missing))
        time.sleep(0.05)
        arrived = store.add("arrivals", 0)


def _missing_message(process: ProcessInfo, wait: timedelta, missing: list[int] | None) -> str:
    who = (
        "some of the others"
        if missing is None
        else ("rank " if len(missing) == 1 else "ranks ") + ", ".join(map(str, missing))
    )
    return (
        f"rank {process.global_rank} waited {wait.total_seconds():g} s for the {process.world_size} processes of the "
        f"run to join its process group, but {who} never joined: every process must call the same Trainer "
        "method (fit/validate/test/predict) or Runtime.launch; a program that calls it on rank 0 only, or a "
        "process that ended or failed before it, leaves the others waiting. Where a process is only slow to "
        "arrive (a download on rank 0 before fit), give the strategy a longer timeout, which is also the join "
        "wait: e.g. DDPStrategy(timeout=timedelta(hours=1)) (default: 30 minutes, as Lightning's)"
    )


def leave_process_group(*, failed: bool, timeout: float = LEAVE_TIMEOUT) -> list[int]:
    """Destroy the default group; after a failure at once, since closing our connections is
    what unblocks waiting peers. Returns the ranks that did not arrive at the leave barrier
    within ``timeout`` seconds (this rank then leaves without them, and says so)."""
    if not dist.is_initialized():
        return []
    missing: list[int] = []
    if failed:
        stop_watching()  # it holds the group, whose connections must close now (departures.py)
    else:
        # Leave together: a rank that tears its group down while a peer still talks to the
        # rendezvous store can abort in gloo's threads. Through the store, with a timeout that
        # holds on every rank (gloo's monitored_barrier enforces it on rank 0 only), and with a
        # departure record that lets a peer waiting in a collective this rank will never join
        # end the run with a message (supervision/departures.py) instead of waiting on.
        missing = leave_together(timeout=timeout)
        if not missing and dist.get_backend() != "gloo":
            # Every rank is here: NCCL's barrier returns at once and, as before, waits for the
            # device's outstanding collectives before the communicators go.
            with contextlib.suppress(RuntimeError):
                dist.barrier()
    dist.destroy_process_group()
    # The group's worker threads outlive it (DDP and ZeroRedundancyOptimizer still hold it),
    # and one may not yet have freed the tensors of its last collective (zero1 broadcasts
    # parameters at every step). Freeing a tensor that Python can see takes the GIL, and a
    # thread that asks for it once the interpreter is finalizing aborts the process
    # ("terminate called without an active exception"; pytorch/pytorch#190489). Give them
    # the GIL and the CPU for a moment while the interpreter is whole.
    time.sleep(0.1)
    return missing
