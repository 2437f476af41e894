"""What a Trainer's checkpoint save costs beside the save a user writes by hand (issue 29, item 4).

The model: ``--layers`` Linear(width, width) (3 x 4096 by default: 50.3M parameters) and Adam's
state after one step, about 600 MB in fp32. Each variant runs in its own fresh processes, the
variants alternate, and each process saves ``--saves`` times to new paths in one folder, timing
each save (CPU: ``process_time``, summed over the ranks; wall: ``perf_counter`` on rank 0,
between barriers in the distributed mode); the first save of a process (first-call imports,
fresh page-cache pages) is reported apart from the later ones.

single file (1 process):
  torch.save   the reference: ``{"state_dict": model.state_dict(), "optimizer_states":
               [optimizer.state_dict()], ...}`` written with ``torch.save`` to an open file,
               flushed and fsync'd (what a durable hand-written save does)
  trainmesh    ``trainer.save_checkpoint(path)`` after a 1-step fit of the same model (callbacks'
               and loops' state added; written by ``checkpoint.atomic_save``: a temporary file,
               fsync, rename, the folder fsync'd)

distributed (``--distributed``: 2 processes, gloo, FSDP2 over each Linear and the whole model):
  dcp.save     the reference: ``get_state_dict(model, optimizer)`` (torch's distributed state
               dicts), then ``torch.distributed.checkpoint.save`` to a new folder
  trainmesh    ``trainer.save_checkpoint(folder)`` after a 1-step fit under
               ``FSDPStrategy(state_dict_type="sharded")`` (the default, "full", writes one file)

    python benchmarks/checkpoint_save_cost.py [--distributed] [--repeats 3] [--saves 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from typing import Any

import torch
from torch import nn

import trainmesh as tm
from isolated import load, run_ranks, settings, spread, write_result

BATCH = 4


def build(width: int, layers: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def one_step(model: nn.Module, optimizer: torch.optim.Optimizer, width: int) -> None:
    model(torch.randn(BATCH, width)).pow(2).mean().backward()
    optimizer.step()  # Adam's exp_avg and exp_avg_sq exist from here: 3 x the weights in all


class Net(tm.Module):
    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.width = width
        self.net = build(width, layers)

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def barrier() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


def timed_saves(save: Any, folder: str, saves: int) -> list[dict[str, float]]:
    """Each save's CPU and wall seconds; ``save(path)`` writes to a new path each time."""
    times = []
    for index in range(saves):
        path = os.path.join(folder, f"save{index}")
        barrier()
        wall, cpu = time.perf_counter(), time.process_time()
        save(path)
        cpu = time.process_time() - cpu
        barrier()
        times.append({"cpu": cpu, "wall": time.perf_counter() - wall})
    return times


def torch_save_variant(args: argparse.Namespace, folder: str) -> list[dict[str, float]]:
    model = build(args.width, args.layers)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    one_step(model, optimizer, args.width)

    def save(path: str) -> None:
        checkpoint = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "epoch": 0}
        with open(path, "wb") as handle:
            torch.save(checkpoint, handle)
            handle.flush()
            os.fsync(handle.fileno())

    return timed_saves(save, folder, args.saves)


def dcp_variant(args: argparse.Namespace, folder: str) -> list[dict[str, float]]:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    torch.distributed.init_process_group("gloo")
    model = build(args.width, args.layers)
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    one_step(model, optimizer, args.width)

    def save(path: str) -> None:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)

    return timed_saves(save, folder, args.saves)


def sharded_fsdp() -> Any:
    """fsdp saving a distributed checkpoint (a folder, each rank its shards): what dcp.save writes."""
    from trainmesh.strategies import FSDPStrategy

    return FSDPStrategy(state_dict_type="sharded")


def trainer_variant(args: argparse.Namespace, folder: str, strategy: Any) -> list[dict[str, float]]:
    from torch.utils.data import DataLoader, TensorDataset

    world = 2 if args.distributed else 1
    module = Net(args.width, args.layers)
    data = TensorDataset(torch.randn(BATCH * world, args.width))
    trainer = tm.Trainer(
        accelerator="cpu",
        strategy=strategy,
        devices=world,
        max_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=folder,
    )
    trainer.fit(module, DataLoader(data, batch_size=BATCH))
    return timed_saves(trainer.save_checkpoint, folder, args.saves)


def worker(args: argparse.Namespace) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    folder = args.folder  # the run's own, made by the parent: every rank writes into the same one
    if args.worker == "torch.save":
        times = torch_save_variant(args, folder)
    elif args.worker == "dcp.save":
        times = dcp_variant(args, folder)
    else:
        times = trainer_variant(args, folder, sharded_fsdp() if args.distributed else "auto")
    first = os.path.join(folder, "save0")
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(first) for f in fs)
    size = size or os.path.getsize(first)
    write_result(args.out, int(os.environ.get("RANK", "0")), {"times": times, "bytes": size, "settings": settings()})


def report(args: argparse.Namespace, runs: dict[str, list[list[dict]]]) -> None:
    names = list(runs)
    base = runs[names[0]]

    def figure(ranks: list[dict], which: slice, kind: str) -> float:
        # CPU summed over the ranks, wall on rank 0; the median over the process's saves in ``which``.
        per_save = zip(*(r["times"][which] for r in ranks))
        values = [sum(s[kind] for s in saves) if kind == "cpu" else saves[0][kind] for saves in per_save]
        return statistics.median(values)

    size = base[0][0]["bytes"] / 1e6
    mode = "distributed: 2 processes (gloo), FSDP2" if args.distributed else "single file, 1 process"
    print(
        f"{mode}; {args.layers} x Linear({args.width}, {args.width}) + Adam state, {size:.0f} MB per save; "
        f"{args.repeats} runs per variant in fresh processes, alternating, {args.saves} saves each; {load()}"
    )
    print("CPU summed over ranks, wall on rank 0: median (min-max) over runs; ratio paired with the reference run")
    for label, which in (("first save", slice(0, 1)), ("later saves", slice(1, None))):
        if which.start == 1 and args.saves < 2:
            continue
        for name in names:
            cpu = [figure(r, which, "cpu") for r in runs[name]]
            wall = [figure(r, which, "wall") for r in runs[name]]
            cpu_ratio = [c / figure(b, which, "cpu") for c, b in zip(cpu, base)]
            wall_ratio = [w / figure(b, which, "wall") for w, b in zip(wall, base)]
            print(
                f"{label:11s} {name:10s} CPU {spread(cpu)} s  x{spread(cpu_ratio)} | wall {spread(wall)} s  "
                f"x{spread(wall_ratio)}  target <= 1.05"
            )
    for name in names:
        print(f"settings {name}: {runs[name][0][0]['settings']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--saves", type=int, default=3, help="saves per process, each to a new path")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the checkpoints are written")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    names = ["dcp.save", "trainmesh"] if args.distributed else ["torch.save", "trainmesh"]
    shared = ["--width", str(args.width), "--layers", str(args.layers), "--saves", str(args.saves)]
    shared += ["--threads", str(args.threads), "--dir", args.dir] + (["--distributed"] if args.distributed else [])
    runs: dict[str, list[list[dict]]] = {name: [] for name in names}
    for _ in range(args.repeats):
        for name in names:
            with tempfile.TemporaryDirectory(dir=args.dir) as folder:
                runs[name].append(
                    run_ranks(
                        os.path.abspath(__file__),
                        [*shared, "--worker", name, "--folder", folder],
                        world=2 if args.distributed else 1,
                        timeout=args.timeout,
                        env={"OMP_NUM_THREADS": str(args.threads)},
                        launcher=args.distributed,
                    )
                )
    report(args, runs)


if __name__ == "__main__":
    main()
