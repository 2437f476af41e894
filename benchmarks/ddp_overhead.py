"""Trainer(strategy="ddp") vs the keras-io seed's hand-written DDP loop, on 2 CPU processes (gloo).

The seed's loop: ``DistributedSampler(shuffle=False)``, ``DistributedDataParallel``, Adam; here
on the 784-128-10 MLP, batch 16 per process, generated data, one epoch per run. One pair of
worker processes (started with ``torch.multiprocessing.spawn``) joins one gloo process group
and runs the variants alternately (hand-written, trainmesh[, lightning]), so that machine
noise hits every variant alike. A run (building the model, and the Trainer, then one epoch) is
timed on rank 0 between two barriers; the medians' ratios are printed, and whether the
Trainer's final weights are bit-identical to the hand-written loop's.

    python benchmarks/ddp_overhead.py [--samples 8192] [--repeats 7] [--no-lightning]

The workers get torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...), so
both Trainers see processes that something else started and launch none; and since the group
is already initialized, they use it and leave it alone, as a test harness would have them do.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
import warnings
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import trainmesh as tm
from seed_mlp import MLPModule, build_mlp, handwritten_epoch, lightning_mlp
from trainmesh.data.synthetic import make_classification_tensors
from trainmesh.launchers.environments import find_free_port

WORLD_SIZE = 2


def seed_loader(dataset: TensorDataset, *, rank: int, batch_size: int) -> DataLoader:
    sampler = DistributedSampler(dataset, num_replicas=WORLD_SIZE, rank=rank, shuffle=False)
    return DataLoader(dataset, sampler=sampler, batch_size=batch_size, shuffle=False)


def handwritten_loop(dataset: TensorDataset, *, rank: int, batch_size: int) -> torch.nn.Module:
    # The keras-io seed's per-device function, minus the process group (made once, outside).
    loader = seed_loader(dataset, rank=rank, batch_size=batch_size)
    torch.manual_seed(0)
    model = DistributedDataParallel(build_mlp())
    handwritten_epoch(model, torch.optim.Adam(model.parameters(), lr=1e-3), loader)
    return model.module


def trainer_loop(dataset: TensorDataset, *, batch_size: int) -> torch.nn.Module:
    torch.manual_seed(0)
    module = MLPModule()
    trainer = tm.Trainer(
        strategy="ddp",
        devices=WORLD_SIZE,
        accelerator="cpu",
        max_epochs=1,
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    # A plain loader: the Trainer adds the DistributedSampler (no shuffle, as the seed's).
    trainer.fit(module, DataLoader(dataset, batch_size=batch_size))
    return module.net


def lightning_loop(dataset: TensorDataset, *, rank: int, batch_size: int, root: str) -> torch.nn.Module:
    import lightning as L

    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)  # the "GPU available" lines, in every run

    torch.manual_seed(0)
    module = lightning_mlp()
    trainer = L.Trainer(
        strategy="ddp",
        devices=WORLD_SIZE,
        accelerator="cpu",
        max_epochs=1,
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        default_root_dir=root,
        use_distributed_sampler=False,
    )
    # The seed's loader, kept as it is: the sampler Lightning would add always shuffles a
    # training set (PL_GLOBAL_SEED order), so its weights could not match the seed's.
    trainer.fit(module, seed_loader(dataset, rank=rank, batch_size=batch_size))
    return module.net


def timed(fn, *args: Any, **kwargs: Any) -> tuple[float, torch.nn.Module]:
    # The barriers make the time the slower rank's: a run ends when every process is done.
    dist.barrier()
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    dist.barrier()
    return time.perf_counter() - start, result


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def lightning_reuses_group(dataset: TensorDataset, *, rank: int, batch_size: int, root: str) -> str | None:
    """Run Lightning once; None when it trained in our group and left it usable, else why not."""
    try:
        import lightning  # noqa: F401
    except ImportError:
        return "lightning is not installed"
    group, environment, threads = dist.group.WORLD, dict(os.environ), torch.get_num_threads()
    try:
        lightning_loop(dataset, rank=rank, batch_size=batch_size, root=root)
    except Exception as err:  # a peer left waiting in a collective fails at the group's timeout
        return f"its fit failed in the shared group ({type(err).__name__}: {err})"
    if not dist.is_initialized() or dist.group.WORLD is not group:
        return "it replaced or destroyed the process group"
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
        return f"its fit changed torch's thread count from {threads}"
    if dict(os.environ) != environment:
        changed = sorted(k for k in environment.keys() | os.environ.keys() if environment.get(k) != os.environ.get(k))
        os.environ.clear()
        os.environ.update(environment)
        return f"its fit changed the environment ({', '.join(changed)}), which later runs would see"
    return None


def worker(rank: int, args: argparse.Namespace, port: int) -> None:
    # torchrun's environment, so that the Trainers take these processes as a launcher's. The run
    # id matters to Lightning: without it Lightning picks its own LightningEnvironment, whose
    # teardown deletes WORLD_SIZE, and the next trainmesh Trainer would then start an agent.
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        GROUP_RANK="0",
        WORLD_SIZE=str(WORLD_SIZE),
        LOCAL_WORLD_SIZE=str(WORLD_SIZE),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TORCHELASTIC_RUN_ID=f"ddp-overhead-{port}",
        # Lightning sets the thread count to cores / processes unless this is set.
        OMP_NUM_THREADS=str(args.threads),
    )
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    # A timeout so that a rank left waiting in a collective fails rather than hangs.
    dist.init_process_group(
        "gloo", init_method="env://", rank=rank, world_size=WORLD_SIZE, timeout=timedelta(seconds=120)
    )
    x, y = make_classification_tensors(args.samples, 784, 10, seed=0)
    dataset = TensorDataset(x, y)
    times: dict[str, list[float]] = {"handwritten": [], "trainmesh": [], "lightning": []}
    with tempfile.TemporaryDirectory() as root:
        # Warm-up: allocator, kernels, first-call imports.
        handwritten_loop(dataset, rank=rank, batch_size=args.batch_size)
        trainer_loop(dataset, batch_size=args.batch_size)
        skip_lightning = (
            "--no-lightning given"
            if args.no_lightning
            else lightning_reuses_group(dataset, rank=rank, batch_size=args.batch_size, root=root)
        )
        reasons: list[str | None] = [None] * WORLD_SIZE
        dist.all_gather_object(reasons, skip_lightning)  # every rank must make the same choice
        skip_lightning = next((reason for reason in reasons if reason), None)
        for _ in range(args.repeats):
            t, ref = timed(handwritten_loop, dataset, rank=rank, batch_size=args.batch_size)
            times["handwritten"].append(t)
            t, ours = timed(trainer_loop, dataset, batch_size=args.batch_size)
            times["trainmesh"].append(t)
            if skip_lightning is None:
                t, lit = timed(lightning_loop, dataset, rank=rank, batch_size=args.batch_size, root=root)
                times["lightning"].append(t)
    if rank == 0:
        steps = len(seed_loader(dataset, rank=0, batch_size=args.batch_size))
        report(
            args,
            times,
            steps=steps,
            identical=same_weights(ref, ours),
            lightning_identical=None if skip_lightning else same_weights(ref, lit),
            skip_lightning=skip_lightning,
        )
    dist.barrier()
    dist.destroy_process_group()


def report(
    args: argparse.Namespace,
    times: dict[str, list[float]],
    *,
    steps: int,
    identical: bool,
    lightning_identical: bool | None,
    skip_lightning: str | None,
) -> None:
    base = statistics.median(times["handwritten"])

    def ratios(name: str) -> str:
        # The ratio of medians, and the median of each repeat's own ratio (its neighbours in
        # time), which drifts in the machine's load cancel better.
        paired = statistics.median(t / h for t, h in zip(times[name], times["handwritten"]))
        return f"ratio {statistics.median(times[name]) / base:.3f} (paired {paired:.3f})"

    print(
        f"{steps} steps per run ({args.samples} samples, {WORLD_SIZE} processes x batch {args.batch_size}, gloo), "
        f"{args.repeats} alternating runs each, torch threads={args.threads} per process"
    )
    print(f"hand-written DDP     median {base:.3f} s  ({base / steps * 1e6:.0f} us/step)")
    ours = statistics.median(times["trainmesh"])
    print(f"trainmesh ddp        median {ours:.3f} s  {ratios('trainmesh')}  target <= 1.05")
    if times["lightning"]:
        lit = statistics.median(times["lightning"])
        print(f"lightning ddp        median {lit:.3f} s  {ratios('lightning')}")
    else:
        print(f"lightning ddp        skipped: {skip_lightning}")
    print(f"trainmesh weights bit-identical to the hand-written loop: {identical}")
    if lightning_identical is not None:
        print(f"lightning weights bit-identical to the hand-written loop: {lightning_identical}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=32768)
    parser.add_argument("--batch-size", type=int, default=16, help="per process")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process (1 = least noise)")
    parser.add_argument("--no-lightning", action="store_true", help="do not time Lightning even if installed")
    args = parser.parse_args()
    torch.multiprocessing.spawn(worker, args=(args, find_free_port()), nprocs=WORLD_SIZE)


if __name__ == "__main__":
    main()
