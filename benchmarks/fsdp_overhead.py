"""Trainer(strategy="fsdp") vs a hand-written FSDP2 loop, on 2 CPU processes (gloo).

The hand-written loop is what torchtitan and the FSDP2 tutorial write: ``fully_shard`` on each
block, then on the whole model, ``DistributedSampler(shuffle=False)``, Adam. The model is a stack
of ``--depth`` Linear(width, width) + Tanh blocks and a 10-class head, held by the trainmesh module
as ``self.net`` (so the Trainer's automatic shard units are what is timed: no ``wrap=``). One pair
of worker processes joins one gloo group and runs the variants alternately, as
``ddp_overhead.py`` does (its helpers are reused); a run (building the model and the Trainer,
then one epoch) is timed on rank 0 between two barriers; the medians' ratios are printed, and
whether the Trainer's final weights equal the hand-written loop's.

    python benchmarks/fsdp_overhead.py [--samples 4096] [--repeats 5] [--width 512] [--depth 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from ddp_overhead import WORLD_SIZE, seed_loader, timed
from seed_mlp import handwritten_epoch
from trainmesh.data.synthetic import make_classification_tensors
from trainmesh.launchers.environments import find_free_port

CLASSES = 10


def build_net(width: int, depth: int) -> torch.nn.Module:
    torch.manual_seed(0)
    blocks = torch.nn.Sequential(
        *[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()) for _ in range(depth)]
    )
    return torch.nn.Sequential(blocks, torch.nn.Linear(width, CLASSES))


class NetModule(tm.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.net = build_net(width, depth)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def handwritten_loop(dataset: TensorDataset, args: argparse.Namespace, rank: int) -> dict[str, torch.Tensor]:
    from torch.distributed.fsdp import fully_shard

    loader = seed_loader(dataset, rank=rank, batch_size=args.batch_size)
    model = build_net(args.width, args.depth)
    for block in model[0]:
        fully_shard(block)
    fully_shard(model)
    handwritten_epoch(model, torch.optim.Adam(model.parameters(), lr=1e-3), loader)
    return {name: p.full_tensor() for name, p in model.named_parameters()}


def trainer_loop(dataset: TensorDataset, args: argparse.Namespace, rank: int) -> dict[str, torch.Tensor]:
    module = NetModule(args.width, args.depth)
    trainer = tm.Trainer(
        strategy="fsdp",
        devices=WORLD_SIZE,
        accelerator="cpu",
        max_epochs=1,
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(module, DataLoader(dataset, batch_size=args.batch_size))
    return {
        name.removeprefix("net."): p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
        for name, p in module.named_parameters()
    }


def worker(rank: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        GROUP_RANK="0",
        WORLD_SIZE=str(WORLD_SIZE),
        LOCAL_WORLD_SIZE=str(WORLD_SIZE),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TORCHELASTIC_RUN_ID=f"fsdp-overhead-{port}",
        OMP_NUM_THREADS=str(args.threads),
    )
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    dist.init_process_group(
        "gloo", init_method="env://", rank=rank, world_size=WORLD_SIZE, timeout=timedelta(seconds=120)
    )
    x, y = make_classification_tensors(args.samples, args.width, CLASSES, seed=0)
    dataset = TensorDataset(x, y)
    times: dict[str, list[float]] = {"handwritten": [], "trainmesh": []}
    handwritten_loop(dataset, args, rank)  # warm-up: allocator, kernels, first-call imports
    trainer_loop(dataset, args, rank)
    for _ in range(args.repeats):
        t, ref = timed(handwritten_loop, dataset, args, rank)
        times["handwritten"].append(t)
        t, ours = timed(trainer_loop, dataset, args, rank)
        times["trainmesh"].append(t)
    if rank == 0:
        steps = len(seed_loader(dataset, rank=0, batch_size=args.batch_size))
        base, mine = statistics.median(times["handwritten"]), statistics.median(times["trainmesh"])
        paired = statistics.median(t / h for t, h in zip(times["trainmesh"], times["handwritten"]))
        params = sum(p.numel() for p in ref.values())
        same = list(ref) == list(ours) and all(torch.equal(ref[k], ours[k]) for k in ref)
        print(
            f"{steps} steps per run ({args.samples} samples, {WORLD_SIZE} processes x batch {args.batch_size}, gloo), "
            f"{params / 1e6:.2f}M parameters, {args.repeats} alternating runs each, torch threads={args.threads}"
        )
        print(f"hand-written FSDP2   median {base:.3f} s  ({base / steps * 1e6:.0f} us/step)")
        print(
            f"trainmesh fsdp       median {mine:.3f} s  ratio {mine / base:.3f} (paired {paired:.3f})  target <= 1.05"
        )
        print(f"trainmesh weights identical to the hand-written loop: {same}")
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    args = parser.parse_args()
    torch.multiprocessing.spawn(worker, args=(args, find_free_port()), nprocs=WORLD_SIZE)


if __name__ == "__main__":
    main()
