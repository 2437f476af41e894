"""Recognise processes started by torchrun, SLURM or the user (Lightning's ``LOCAL_RANK``), and read
their place in the run.

Under either, trainmesh starts no process itself: the scheduler already started one per
device, and the environment says which one this is.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator, Mapping

from trainmesh.launchers.base import ProcessInfo


def managed_process(environ: Mapping[str, str] | None = None, *, devices: int, num_nodes: int) -> ProcessInfo | None:
    """This process's place when torchrun or SLURM started it; None when nothing did."""
    env = os.environ if environ is None else environ
    if "TORCHELASTIC_RUN_ID" in env or {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"} <= set(env):
        process = _torchrun_process(env)
    elif _in_slurm_job_step(env):
        process = _slurm_process(env, devices=devices)
    elif "LOCAL_RANK" in env:
        process = _user_started_process(env, devices=devices, num_nodes=num_nodes)
    else:
        return None
    expected = devices * num_nodes
    if process.world_size != expected:
        raise ValueError(
            f"the launcher started {process.world_size} processes but Trainer(devices={devices}, "
            f"num_nodes={num_nodes}) expects {expected}; make them agree (torchrun: --nproc-per-node "
            "and --nnodes; SLURM: --ntasks-per-node and --nodes)"
        )
    return process


def already_started(*, devices: int, num_nodes: int) -> ProcessInfo | None:
    """This process's place when something else started the run's processes: a process group
    that already exists, or torchrun/SLURM. None when the launcher must start them itself."""
    return existing_group_process(devices=devices, num_nodes=num_nodes) or managed_process(
        devices=devices, num_nodes=num_nodes
    )


def planned_process(*, devices: int, num_nodes: int) -> ProcessInfo:
    """This process's place before its launcher has set the run up, as Lightning's strategy reports it
    from the Trainer's construction on (its ``set_world_ranks``): a process something already started
    (torchrun, SLURM, trainmesh's own agent or spawn, a process group that exists) its own place; the
    process that will start them local rank 0 of ``devices * num_nodes``, as Lightning's launching
    process is. A script's code before ``fit`` reads it (``trainer.world_size``, ``is_global_zero``),
    and ddp_spawn's launching process after."""
    try:
        started = already_started(devices=devices, num_nodes=num_nodes)
    except ValueError:  # a mismatch, which the launch itself reports in its words
        started = None
    if started is not None:
        return started
    node = int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "0")))
    return ProcessInfo(
        global_rank=node * devices, node_rank=node, world_size=devices * num_nodes, local_world_size=devices
    )


def existing_group_process(*, devices: int, num_nodes: int) -> ProcessInfo | None:
    """This process's place in a process group the user (or a harness) already created."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    world, rank = dist.get_world_size(), dist.get_rank()
    if world != devices * num_nodes:
        raise ValueError(
            f"torch.distributed is already initialized with {world} processes, but Trainer(devices={devices}, "
            f"num_nodes={num_nodes}) expects {devices * num_nodes}; make them agree"
        )
    local_rank = int(os.environ.get("LOCAL_RANK", rank % devices))
    return ProcessInfo(
        global_rank=rank, local_rank=local_rank, node_rank=rank // devices, world_size=world, local_world_size=devices
    )


def _torchrun_process(env: Mapping[str, str]) -> ProcessInfo:
    local_world = int(env.get("LOCAL_WORLD_SIZE", "1"))
    rank = int(env["RANK"])
    return ProcessInfo(
        global_rank=rank,
        local_rank=int(env["LOCAL_RANK"]),
        node_rank=int(env.get("GROUP_RANK", rank // max(local_world, 1))),
        world_size=int(env["WORLD_SIZE"]),
        local_world_size=local_world,
        master_addr=env["MASTER_ADDR"],
        master_port=int(env["MASTER_PORT"]),
    )


def _user_started_process(env: Mapping[str, str], *, devices: int, num_nodes: int) -> ProcessInfo:
    """Lightning's ``LightningEnvironment`` with ``LOCAL_RANK`` set: the user started every process
    (``creates_processes_externally``), each at ``NODE_RANK * devices + LOCAL_RANK`` of ``devices * num_nodes``,
    meeting at ``MASTER_ADDR`` (default 127.0.0.1) and ``MASTER_PORT``."""
    local, node = int(env["LOCAL_RANK"]), int(env.get("NODE_RANK", env.get("GROUP_RANK", "0")))
    if not env.get("MASTER_PORT", "").isdigit():
        raise ValueError(
            f"LOCAL_RANK={local} is set, so this process is one the user started (as Lightning reads it), but "
            "MASTER_PORT is not: set MASTER_PORT (a free port of node 0, the same in every process) and "
            "MASTER_ADDR, or unset LOCAL_RANK and let the Trainer start the processes"
        )
    return ProcessInfo(
        global_rank=node * devices + local,
        local_rank=local,
        node_rank=node,
        world_size=devices * num_nodes,
        local_world_size=devices,
        master_addr=env.get("MASTER_ADDR") or "127.0.0.1",
        master_port=int(env["MASTER_PORT"]),
    )


def _in_slurm_job_step(env: Mapping[str, str]) -> bool:
    # An interactive `salloc` shell also has SLURM_NTASKS, but its job name is the shell's.
    return "SLURM_NTASKS" in env and "SLURM_PROCID" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")


def _slurm_process(env: Mapping[str, str], *, devices: int) -> ProcessInfo:
    per_node = env.get("SLURM_NTASKS_PER_NODE")
    if per_node is not None:
        leading = re.match(r"\d+", per_node)  # "2(x3)" -> 2
        if leading is None:
            raise ValueError(
                f"SLURM_NTASKS_PER_NODE={per_node!r} does not start with a task count; expected a form "
                "such as '2' or '2(x3)': check the job's --ntasks-per-node"
            )
        count = int(leading.group())
        if count != devices:
            raise ValueError(
                f"SLURM starts {count} task(s) per node (--ntasks-per-node={per_node}) but "
                f"Trainer(devices={devices}); set --ntasks-per-node={devices} in the sbatch script, "
                "or devices to match it"
            )
    return ProcessInfo(
        global_rank=int(env["SLURM_PROCID"]),
        local_rank=int(env.get("SLURM_LOCALID", "0")),
        node_rank=int(env.get("SLURM_NODEID", "0")),
        world_size=int(env["SLURM_NTASKS"]),
        local_world_size=devices,
        master_addr=env.get("MASTER_ADDR") or first_host(env.get("SLURM_NODELIST", "127.0.0.1")),
        # Every task of the job must agree on the port without talking: derive it from the job id.
        master_port=int(env.get("MASTER_PORT") or 15000 + int(env.get("SLURM_JOB_ID", "0")) % 20000),
    )


def restart_reason(environ: Mapping[str, str] | None = None) -> str | None:
    """Why this process is a second (or later) start of the same run: an elastic agent restarted
    its workers after a failure, or SLURM requeued the job; None on a first start."""
    env = os.environ if environ is None else environ
    # Per node (pytorch/pytorch#108158): a healthy node's workers may still read 0 here.
    restarts = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    if restarts.isdigit() and int(restarts) > 0:
        return f"restart {restarts} of the elastic agent"
    requeues = env.get("SLURM_RESTART_COUNT", "0")
    if requeues.isdigit() and int(requeues) > 0:
        return f"SLURM requeue {requeues} of job {env.get('SLURM_JOB_ID', '?')}"
    return None


def slurm_job_id(environ: Mapping[str, str] | None = None) -> int | None:
    """This SLURM job's id, or None outside a batch job (an interactive ``salloc`` shell, whose
    job name is the shell's, counts as outside, as in Lightning's ``SLURMEnvironment.job_id``).

    >>> slurm_job_id({"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train"})
    4242
    >>> slurm_job_id({"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "bash"}) is None
    True
    """
    env = os.environ if environ is None else environ
    if env.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return None
    job = env.get("SLURM_JOB_ID", "")
    return int(job) if job.isdigit() else None


def requeue_slurm_job(environ: Mapping[str, str] | None = None) -> str | None:
    """Put this SLURM job back in the queue (``scontrol requeue``); what happened, in one
    sentence, or None outside a SLURM job. A failure is reported, not raised: the checkpoint
    is already saved, and the job can be resubmitted by hand."""
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        job = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"  # requeue this task only
    command = ["scontrol", "requeue", job]
    if shutil.which("scontrol") is None:
        return (
            f"SLURM job {job} was NOT requeued: `scontrol` is not on PATH in this process; requeue it "
            f"from a login node ({' '.join(command)}) or submit the script again: it resumes from the checkpoint"
        )
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"SLURM job {job} was NOT requeued: `{' '.join(command)}` failed ({err}); requeue or resubmit it by hand"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        return (
            f"SLURM job {job} was NOT requeued: `{' '.join(command)}` said: {why} (was the job submitted "
            "with --no-requeue?); resubmit it by hand: it resumes from the checkpoint"
        )
    return f"requeued SLURM job {job} ({' '.join(command)}); it resumes from the checkpoint when it starts again"


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: "node[003-005,9],gpu1" -> "node003"."""
    match = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist.strip())
    if match is None:
        raise ValueError(f"cannot read the SLURM node list {nodelist!r}; set MASTER_ADDR to the first node's address")
    prefix, ranges = match.group(1), match.group(3)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def find_free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def check_port_free(host: str, port: int) -> None:
    """Fail early, with the fix, when the rendezvous port is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as err:
            raise ValueError(
                f"port {port} on {host} is already in use ({err.strerror}), so the processes cannot "
                "meet there; set MASTER_PORT to a free port, or unset it to let trainmesh pick one"
            ) from None


def require_deterministic_cublas() -> None:
    """cuBLAS is deterministic only with a fixed workspace (torch.use_deterministic_algorithms
    raises without one); set it for this process and the ones it starts, unless the user did."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def set_worker_environment(variables: Mapping[str, str]) -> None:
    """Put ``variables`` in this process's environment, which the workers it starts inherit; a
    value already set (by the user) stands."""
    for name, value in variables.items():
        os.environ.setdefault(name, value)


@contextlib.contextmanager
def main_address_for_rendezvous(address: str | None, port: str | int | None) -> Iterator[None]:
    """``MASTER_ADDR`` / ``MASTER_PORT`` set to ``address`` / ``port`` where given and not set already, for the
    ``env://`` rendezvous inside (Fabric's ``TorchCollective.setup(main_address, main_port)``), and taken away after."""
    added = [
        key
        for key, value in (("MASTER_ADDR", address), ("MASTER_PORT", port))
        if value is not None and key not in os.environ
    ]
    for key, value in (("MASTER_ADDR", address), ("MASTER_PORT", port)):
        if key in added:
            os.environ[key] = str(value)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def publish_seed(seed: int, *, workers: bool) -> str:
    """Lightning's ``seed_everything`` output in this process's environment: ``PL_GLOBAL_SEED`` and
    ``PL_SEED_WORKERS`` (``"0"``/``"1"``), which programs read (trainmesh's own processes get the seed
    explicitly, not through these). Returns the ``PL_GLOBAL_SEED`` written."""
    os.environ["PL_GLOBAL_SEED"] = str(seed)
    os.environ["PL_SEED_WORKERS"] = str(int(workers))
    return os.environ["PL_GLOBAL_SEED"]
