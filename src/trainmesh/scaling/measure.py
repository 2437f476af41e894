"""Measure one process count: start N workers, run the user's training step on a fixed batch
for a warm-up and a few timed windows, and bring back the slowest rank's step times.

The workers are started as torchrun would start them (its environment variables), so the
Runtime of any strategy finds them already started and launches nothing itself.
"""

from __future__ import annotations

import pickle
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any

from trainmesh.scaling.analysis import Measurement
from trainmesh.scaling.load import MachineLoad, cpu_count, load_average, others_busy, read_cpu_times, sample_before


@dataclass(frozen=True)
class Workload:
    """What every worker builds and runs: classes by path, so the settings travel to spawned
    processes as plain data. ``batches`` maps a mode to the per-rank batch size it runs."""

    model_path: str
    model_kwargs: dict[str, Any]
    data_path: str | None
    data_kwargs: dict[str, Any]
    strategy: str = "ddp"
    accelerator: str = "cpu"
    precision: str = "32-true"
    warmup_steps: int = 5
    steps_per_window: int = 20
    windows: int = 3
    peak_flops: float | None = None  # per device; None: the device table's (none for CPUs)
    count_flops: bool = True
    # Torch threads per rank: one count for every N, or None for ``cores // N`` (see threads_per_process).
    threads: int | None = None
    cores: int = 1  # the physical cores (or CPUs) shared out when ``threads`` is None


def threads_per_process(processes: int, *, fixed: int | None, cores: int) -> int:
    """Each rank's torch threads: ``fixed`` at every N, else the cores shared out, ``cores // N``
    (at least 1). Either way the count is set explicitly in every worker: left to torch, a lone
    worker takes every core and, on a busy machine, spin-waits on them, which makes N=1 look far
    slower than it is and every larger N superlinear.

    >>> threads_per_process(1, fixed=None, cores=2), threads_per_process(2, fixed=None, cores=2)
    (2, 1)
    >>> threads_per_process(4, fixed=1, cores=2)
    1
    """
    if fixed is not None:
        if fixed < 1:
            raise ValueError(f"threads={fixed}; pass a positive count, e.g. --threads 1")
        return fixed
    return max(1, cores // processes)


def measure(
    workload: Workload, processes: int, batches: dict[str, int], *, timeout_s: float = 600, idle_s: float = 1.0
) -> dict[str, Measurement]:
    """Run ``workload`` on ``processes`` workers; one :class:`Measurement` per mode in ``batches``,
    with the machine's load over ``idle_s`` before the launch and over the launch itself.

    >>> measure(Workload("trainmesh.demo:DigitsClassifier", {}, "trainmesh.data:DigitsDataModule", {}),
    ...         2, {"strong": 32})  # doctest: +SKIP
    {'strong': Measurement(processes=2, per_rank_batch=32, ...)}
    """
    import torch.multiprocessing as mp

    from trainmesh.launchers.environments import find_free_port

    loadavg_before, others_before = sample_before(idle_s)
    start = read_cpu_times()
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    port = find_free_port()
    workers = mp.start_processes(
        _worker, args=(workload, processes, port, batches, results), nprocs=processes, join=False, start_method="spawn"
    )
    received = None
    deadline = time.monotonic() + timeout_s
    while not workers.join(timeout=0.05):  # raises, and stops every worker, if one fails
        while not results.empty():
            received = results.get()
        if time.monotonic() > deadline:
            for process in workers.processes:
                process.kill()
            raise TimeoutError(f"measuring {processes} processes took over {timeout_s:.0f} s")
    while not results.empty():
        received = results.get()
    # Read after joining: only children already waited for count as the sweep's own CPU time.
    others_during, ours_during = others_busy(start, read_cpu_times())
    assert received is not None, "rank 0 sent no measurement"
    load = MachineLoad(cpu_count(), loadavg_before, others_before, load_average(), others_during, ours_during)
    measured: dict[str, Measurement] = pickle.loads(received)
    return {mode: replace(run, load=load) for mode, run in measured.items()}


def _worker(rank: int, workload: Workload, processes: int, port: int, batches: dict[str, int], results: Any) -> None:
    import torch

    from trainmesh.launchers.base import ProcessInfo
    from trainmesh.launchers.spawn import set_torchrun_environment

    set_torchrun_environment(
        ProcessInfo(
            global_rank=rank, local_rank=rank, world_size=processes, local_world_size=processes, master_port=port
        )
    )
    threads = threads_per_process(processes, fixed=workload.threads, cores=workload.cores)
    torch.set_num_threads(threads)
    import warnings

    from trainmesh.runtime import Runtime

    # The step runs outside a Trainer, so self.log has nowhere to send values: expected here.
    warnings.filterwarnings(
        "ignore", message=r".*called outside a Trainer run.*|.*reference is not registered on the model.*"
    )
    # One Runtime (one process group) for every mode: a second rendezvous would cost seconds.
    runtime = Runtime(
        accelerator=workload.accelerator, devices=processes, strategy=workload.strategy, precision=workload.precision
    )
    runtime.setup_environment()
    measured = {mode: _measure_mode(runtime, workload, processes, batch) for mode, batch in batches.items()}
    if rank == 0:
        results.put(pickle.dumps(measured))
    runtime.teardown()


def _measure_mode(runtime: Any, workload: Workload, processes: int, batch_size: int) -> Measurement:
    import torch

    from trainmesh.seed import seed_everything
    from trainmesh.trainer.optimizers import parse_optimizers
    from trainmesh.utilities.class_paths import import_class

    seed_everything(0)
    model = import_class(workload.model_path, "model")(**workload.model_kwargs)
    batch = runtime.to_device(_fixed_batch(workload, batch_size))
    optimizers, _ = parse_optimizers(model.configure_optimizers(), type(model).__name__)
    model, optimizer = runtime.setup(model, optimizers[0])

    def step(sync: bool) -> None:
        optimizer.zero_grad()
        runtime.train_step(model, batch, 0, sync_grads=sync)
        optimizer.step()

    flops = _count_flops(step) if workload.count_flops else None
    windows: dict[bool, list[float]] = {True: [], False: []}
    for sync in (True, False):
        for _ in range(workload.warmup_steps):
            step(sync)
        for _ in range(workload.windows):
            windows[sync].append(_timed_window(runtime, step, sync, workload.steps_per_window))
    from trainmesh.callbacks.throughput import peak_memory_bytes

    peak = peak_memory_bytes(runtime.device)
    peak_all = max(runtime.all_gather_object(peak))
    return Measurement(
        processes=processes,
        per_rank_batch=batch_size,
        step_s=windows[True],
        no_sync_step_s=windows[False],
        peak_memory_bytes=peak_all,
        flops_per_rank_step=flops,
        tokens_per_rank_step=_tokens(batch),
        peak_flops=_peak_flops(workload, runtime),
        threads=torch.get_num_threads(),  # read back, not assumed: what the timed steps ran with
    )


def _count_flops(step: Any) -> int:
    """One synced step's FLOPs (forward and backward) on this rank, counted once before the
    warm-up so the counter's slowdown never reaches a timed window."""
    from trainmesh.callbacks.throughput import count_step_flops

    with count_step_flops() as counter:
        step(True)
    return int(counter.get_total_flops())


def _tokens(batch: Any) -> int | None:
    """B * T for an integer (B, T) input, the rule ThroughputMonitor uses; None for other batches."""
    from trainmesh.callbacks.throughput import token_count
    from trainmesh.utilities.collections import first_tensor

    return token_count(first_tensor(batch))


def _peak_flops(workload: Workload, runtime: Any) -> float | None:
    if workload.peak_flops is not None:
        return workload.peak_flops
    if runtime.device.type != "cuda":
        return None  # no table of CPU peaks: they vary with the part, its clocks and its vector units
    import torch

    from trainmesh.callbacks.throughput import peak_flops_for

    return peak_flops_for(torch.cuda.get_device_name(runtime.device), runtime.precision.name)


def _timed_window(runtime: Any, step: Any, sync: bool, steps: int) -> float:
    """The median step time of the slowest rank over ``steps`` steps."""
    import torch

    times = []
    for _ in range(steps):
        runtime.barrier()  # every rank starts the step together, so the slowest one sets its end
        start = time.perf_counter()
        step(sync)
        if runtime.device.type == "cuda":
            torch.cuda.synchronize(runtime.device)
        times.append(time.perf_counter() - start)
    slowest = runtime.all_reduce(torch.tensor(times, dtype=torch.float64), op="max")
    return statistics.median(slowest.tolist())


def _fixed_batch(workload: Workload, batch_size: int) -> Any:
    """``batch_size`` samples from the data's training loader, as one batch: loading is kept out
    of the timing, which measures compute and communication."""
    import torch

    from trainmesh.utilities.class_paths import import_class

    assert workload.data_path is not None  # a measured workload names its data
    data = import_class(workload.data_path, "data")(**workload.data_kwargs)
    data.prepare_data()
    data.setup("fit")
    pieces, count = [], 0
    while count < batch_size:  # a small dataset is repeated until it fills the batch
        for batch in data.train_dataloader():
            pieces.append(batch)
            count += _length(batch)
            if count >= batch_size:
                break
        if not pieces:
            raise ValueError(f"{workload.data_path}'s train_dataloader yielded no batches to measure with")
    return _concat(pieces, batch_size, torch)


def _length(batch: Any) -> int:
    while isinstance(batch, (tuple, list)):
        batch = batch[0]
    if isinstance(batch, dict):
        return _length(next(iter(batch.values())))
    return len(batch)


def _concat(pieces: list[Any], size: int, torch: Any) -> Any:
    first = pieces[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(pieces)[:size]
    if isinstance(first, (tuple, list)):
        return type(first)(_concat([p[i] for p in pieces], size, torch) for i in range(len(first)))
    if isinstance(first, dict):
        return {key: _concat([p[key] for p in pieces], size, torch) for key in first}
    raise TypeError(
        f"cannot build a fixed batch from {type(first).__name__}; batches must be tensors, "
        "tuples, lists or dicts of them"
    )
