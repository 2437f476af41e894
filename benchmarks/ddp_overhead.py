"""Trainer(strategy="ddp") vs the keras-io seed's hand-written DDP loop, on 2 CPU processes (gloo).

The seed's loop: ``DistributedSampler(shuffle=False)``, ``DistributedDataParallel``, Adam; here
on the 784-128-10 MLP, batch 16 per process, generated data. Each variant (hand-written,
trainmesh[, lightning]) runs in its own fresh pair of processes (``isolated.run_ranks``: nothing
one variant sets for the whole process, such as malloc settings, threads or the environment,
reaches another's), the variants alternate, and each process times ``--epochs`` epochs after a
warm-up: a run builds the model (and the Trainer) and trains one epoch. CPU time (summed over
the ranks) and wall time (rank 0) are printed with their spread and paired ratios, with the
settings each variant ran under, and whether the final weights are bit-identical to the
hand-written loop's.

    python benchmarks/ddp_overhead.py [--samples 8192] [--repeats 5] [--no-lightning]

The workers get torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...), so
the Trainers see processes that something else started and launch none.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
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
from isolated import load, run_ranks, settings, spread, write_result
from seed_mlp import MLPModule, build_mlp, handwritten_epoch, lightning_mlp
from trainmesh.data.synthetic import make_classification_tensors

WORLD_SIZE = 2
VARIANTS = ("handwritten", "trainmesh", "lightning")


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


def trainer_loop(dataset: TensorDataset, *, rank: int, batch_size: int) -> torch.nn.Module:
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
    # The seed's loader, kept as it is (a loader that is distributed already is, as in Lightning): a
    # plain one would get Lightning's shuffled order, and the weights could not match the seed's.
    trainer.fit(module, seed_loader(dataset, rank=rank, batch_size=batch_size))
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


def weights_digest(model: torch.nn.Module) -> str:
    """A digest of the final weights, for processes to compare without sending them."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def worker(args: argparse.Namespace) -> None:
    """One variant's run in this fresh process (one of the pair): an epoch to warm up, then the
    timed ones. The process group is made here for the hand-written loop; the Trainers make
    their own from torchrun's environment, as under torchrun."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)  # the "GPU available" lines, in every run
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    rank = int(os.environ["RANK"])
    if args.worker == "handwritten":
        dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    x, y = make_classification_tensors(args.samples, 784, 10, seed=0)
    dataset = TensorDataset(x, y)
    runs = []
    with tempfile.TemporaryDirectory() as root:
        for epoch in range(args.epochs + 1):
            cpu, wall = time.process_time(), time.perf_counter()
            if args.worker == "handwritten":
                model = handwritten_loop(dataset, rank=rank, batch_size=args.batch_size)
            elif args.worker == "trainmesh":
                model = trainer_loop(dataset, rank=rank, batch_size=args.batch_size)
            else:
                model = lightning_loop(dataset, rank=rank, batch_size=args.batch_size, root=root)
            if epoch:  # the first is the warm-up: first-call imports, kernels, the allocator
                runs.append({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall})
    write_result(args.out, rank, {"runs": runs, "weights": weights_digest(model), "settings": settings()})


def run_figures(ranks: list[dict]) -> dict[str, Any]:
    """A process pair's median epoch: CPU summed over the ranks, wall on rank 0."""
    count = len(ranks[0]["runs"])
    cpu = statistics.median(sum(r["runs"][i]["cpu"] for r in ranks) for i in range(count))
    wall = statistics.median(ranks[0]["runs"][i]["wall"] for i in range(count))
    return {"cpu": cpu, "wall": wall, "weights": ranks[0]["weights"], "settings": ranks[0]["settings"]}


def report(args: argparse.Namespace, runs: dict[str, list[dict]], steps: int, skipped: str | None) -> None:
    base = runs["handwritten"]
    print(
        f"{steps} steps per epoch ({args.samples} samples, {WORLD_SIZE} processes x batch {args.batch_size}, gloo); "
        f"{args.repeats} process pairs per variant, fresh and alternating, {args.epochs} timed epochs each after "
        f"a warm-up; torch threads={args.threads} per process; {load()}"
    )
    print("epoch CPU summed over ranks and wall on rank 0: median (min-max) over pairs; ratios paired")
    for name, figures in runs.items():
        cpu, wall = [f["cpu"] for f in figures], [f["wall"] for f in figures]
        cpu_ratio = spread([f["cpu"] / b["cpu"] for f, b in zip(figures, base)])
        wall_ratio = spread([f["wall"] / b["wall"] for f, b in zip(figures, base)])
        print(
            f"{name:12s} CPU {spread(cpu)} s ({statistics.median(cpu) / steps * 1e6:.0f} us/step) x{cpu_ratio} | "
            f"wall {spread(wall)} s x{wall_ratio}" + ("" if name == "handwritten" else "  target <= 1.05")
        )
    if skipped:
        print(f"lightning    skipped: {skipped}")
    for name, figures in runs.items():
        if name != "handwritten":
            same = all(f["weights"] == base[0]["weights"] for f in figures)
            print(f"{name} weights bit-identical to the hand-written loop: {same}")
    for name, figures in runs.items():
        print(f"settings {name}: {figures[0]['settings']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=32768)
    parser.add_argument("--batch-size", type=int, default=16, help="per process")
    parser.add_argument("--repeats", type=int, default=5, help="process pairs per variant")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per process, after a warm-up")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process (1 = least noise)")
    parser.add_argument("--no-lightning", action="store_true", help="do not time Lightning even if installed")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    skipped = "--no-lightning given" if args.no_lightning else None
    if skipped is None and importlib.util.find_spec("lightning") is None:
        skipped = "lightning is not installed"
    names = [v for v in VARIANTS if v != "lightning" or skipped is None]
    shared = ["--samples", str(args.samples), "--batch-size", str(args.batch_size), "--epochs", str(args.epochs)]
    shared += ["--threads", str(args.threads)]
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            ranks = run_ranks(
                os.path.abspath(__file__),
                [*shared, "--worker", name],
                world=WORLD_SIZE,
                timeout=600,
                env={"OMP_NUM_THREADS": str(args.threads)},
            )
            runs[name].append(run_figures(ranks))
    steps = len(seed_loader(TensorDataset(torch.zeros(args.samples, 1)), rank=0, batch_size=args.batch_size))
    report(args, runs, steps, skipped)


if __name__ == "__main__":
    main()
