"""The per-step cost of Trainer(fault_tolerance=...) (torchft) against a hand-written torchft loop
and against plain data parallelism, on CPU.

All train the 784-128-10 MLP, batch 16 per process, Adam, for --steps steps on 2 processes:

- ``ddp``: Trainer(strategy="ddp", devices=2): one gloo group of 2, DDP's all-reduce;
- ``hand_ddp``: the same written by hand: ``init_process_group("gloo")``, torch's DDP, the loop;
- ``ft``: 2 torchft replica groups of 1 process, each Trainer(fault_tolerance=...) (a lighthouse in
  this process, min_replicas=2 so that every step has both; per step: a quorum, the all-reduce over
  torchft's gloo group, should_commit);
- ``hand_ft``: the same 2 replica groups written by hand as torchft's own example
  (``train_ddp.py`` at the root of its repository) does: ``torchft.Manager`` over ``ProcessGroupGloo``,
  ``torchft.DistributedDataParallel``, ``torchft.Optimizer`` (zero_grad starts the quorum, step
  commits), the same lighthouse.

Each run starts fresh processes; the variants alternate (the order turns each round), --rounds times.
Each rank takes its CPU time (process_time: the Rust threads of torchft's Manager and the quorum
thread included; every process gets OMP_NUM_THREADS = cores / 2, as ddp's launcher sets for its 2
workers) and wall time from step --warmup to the end. Printed: CPU ms per step summed over the 2
ranks, wall ms per step (rank 0), median and range over the rounds, the ratios ft / hand_ft and
ft / ddp, and torchft's own fixed cost per step (hand_ft - hand_ddp, CPU summed over the ranks).
Needs torchft (pip install torchft).

    python benchmarks/fault_tolerance_overhead.py [--steps 300] [--warmup 30] [--rounds 5] [--variants ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import trainmesh as tm


class MLP(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class Clock(tm.Callback):
    """This rank's CPU and wall time from step ``warmup`` to the end of training, written to ``out``."""

    def __init__(self, out: Path, warmup: int, name: str) -> None:
        self.out, self.warmup, self.name, self.start = out, warmup, name, (0.0, 0.0)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.global_step == self.warmup and self.start == (0.0, 0.0):
            self.start = (time.process_time(), time.perf_counter())

    def on_train_end(self, trainer, module):
        cpu, wall = time.process_time() - self.start[0], time.perf_counter() - self.start[1]
        steps = trainer.global_step - self.warmup
        (self.out / f"{self.name.format(rank=trainer.global_rank)}.json").write_text(
            json.dumps({"cpu": cpu, "wall": wall, "steps": steps})
        )


def worker(variant: str, out: str, steps: str, warmup: str, lighthouse: str = "", group: str = "0") -> None:
    if variant.startswith("hand"):
        hand_worker(variant, Path(out), int(steps), int(warmup), lighthouse, int(group))
        return
    x = torch.randn(16 * 2 * (int(steps) + 1), 784, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(x, x[:, :10].argmax(1))
    options: dict = dict(strategy="ddp", max_steps=int(steps))
    if variant == "ft":
        ft = tm.FaultTolerance(
            lighthouse, replica_group=int(group), num_replica_groups=2, min_replicas=2, host="127.0.0.1"
        )
        options.update(devices=1, fault_tolerance=ft)
        name = f"ft{group}"
    else:
        options.update(devices=2)
        name = "ddp{rank}"
    trainer = tm.Trainer(
        accelerator="cpu",
        callbacks=[Clock(Path(out), int(warmup), name)],
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=out,
        **options,
    )
    trainer.fit(MLP(), DataLoader(data, batch_size=16))


def hand_worker(variant: str, out: Path, steps: int, warmup: int, lighthouse: str, group: int) -> None:
    """The loop written by hand: torch's DDP over a gloo group of 2 (``hand_ddp``), or one torchft
    replica group of one process as torchft's train_ddp.py example writes it (``hand_ft``)."""
    import torch.distributed as dist

    x = torch.randn(16 * 2 * (steps + 1), 784, generator=torch.Generator().manual_seed(0))
    model = MLP().net  # the same layers and initial weights, as a plain module
    if variant == "hand_ddp":
        dist.init_process_group("gloo")
        rank, name = dist.get_rank(), "hand_ddp{rank}"
        model_: torch.nn.Module = torch.nn.parallel.DistributedDataParallel(model)
        optimizer: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        from datetime import timedelta

        import torchft

        rank, name = group, f"hand_ft{group}"
        inner = torch.optim.Adam(model.parameters(), lr=1e-3)
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        manager = torchft.Manager(
            pg=torchft.ProcessGroupGloo(timeout=timedelta(seconds=60)),
            load_state_dict=lambda state: (
                model.load_state_dict(state["model"]),
                inner.load_state_dict(state["optim"]),
            ),
            state_dict=lambda: {"model": model.state_dict(), "optim": inner.state_dict()},
            min_replica_size=2,
            replica_id=f"hand_{group}",
            lighthouse_addr=lighthouse,
            store_addr="127.0.0.1",
            store_port=store.port,
            hostname="127.0.0.1",
            rank=0,
            world_size=1,
        )
        model_ = torchft.DistributedDataParallel(manager, model)
        optimizer = torchft.Optimizer(manager, inner)
    start = (0.0, 0.0)
    # This process's share through a DataLoader, as torchft's example and the Trainer read it.
    data = TensorDataset(x, x[:, :10].argmax(1))
    sampler = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=False)
    for step, (inputs, labels) in enumerate(DataLoader(data, batch_size=16, sampler=sampler)):
        if step == steps:
            break
        if step == warmup:
            start = (time.process_time(), time.perf_counter())
        optimizer.zero_grad()
        loss = F.cross_entropy(model_(inputs), labels)
        loss.backward()
        optimizer.step()
    cpu, wall = time.process_time() - start[0], time.perf_counter() - start[1]
    (out / f"{name.format(rank=rank)}.json").write_text(json.dumps({"cpu": cpu, "wall": wall, "steps": steps - warmup}))
    if variant == "hand_ddp":
        dist.destroy_process_group()
    else:
        manager.shutdown(wait=False)


def run(variant: str, steps: int, warmup: int) -> dict[str, float]:
    """One fresh run: CPU ms per step summed over the ranks, wall ms per step of the first rank."""
    with tempfile.TemporaryDirectory() as out:
        me = [sys.executable, __file__, "--worker", variant, out, str(steps), str(warmup)]
        env = {**os.environ, "RUST_LOG": "warn"}
        if variant in ("ft", "hand_ft"):
            from torchft.coordination import LighthouseServer

            lighthouse = LighthouseServer(bind="127.0.0.1:0", min_replicas=2)
            # Each group is a process of its own: one torch thread each, as ddp's launcher gives its 2 workers here.
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // 2))
            procs = [
                subprocess.Popen([*me, lighthouse.address(), str(g)], env=env, stderr=subprocess.DEVNULL)
                for g in (0, 1)
            ]
            codes = [p.wait(timeout=600) for p in procs]
            lighthouse.shutdown()
        elif variant == "hand_ddp":
            # The two ranks started as torchrun would start them, with ddp's launcher's thread count.
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // 2))
            procs = [
                subprocess.Popen(me, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stderr=subprocess.DEVNULL)
                for r in (0, 1)
            ]
            codes = [p.wait(timeout=600) for p in procs]
        else:
            codes = [subprocess.run(me, env=env, stderr=subprocess.DEVNULL, timeout=600).returncode]
        assert codes == [0] * len(codes), f"{variant} exited with {codes}"
        ranks = [json.loads(p.read_text()) for p in sorted(Path(out).glob("*.json"))]
    assert len(ranks) == 2, ranks
    return {
        "cpu": 1000 * sum(r["cpu"] for r in ranks) / ranks[0]["steps"],
        "wall": 1000 * ranks[0]["wall"] / ranks[0]["steps"],
    }


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def load() -> str:
    with open("/proc/loadavg") as loadavg:
        return "load " + " ".join(loadavg.read().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", nargs="+", default=["ddp", "ft", "hand_ft", "hand_ddp"], choices=VARIANTS)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in args.variants}
    for round_ in range(args.rounds):
        turn = round_ % len(args.variants)
        for variant in args.variants[turn:] + args.variants[:turn]:
            results[variant].append(run(variant, args.steps, args.warmup))
            print(f"round {round_} {variant}: {results[variant][-1]} ({load()})", flush=True)
    report(results)


def report(results: dict[str, list[dict[str, float]]]) -> None:
    median = {
        key: {v: statistics.median(r[key] for r in runs) for v, runs in results.items()} for key in ("cpu", "wall")
    }
    print(f"{load()} at the end")
    for key in ("cpu", "wall"):
        for variant, runs in results.items():
            values = sorted(r[key] for r in runs)
            print(
                f"{key} ms/step {variant:>8}: median {median[key][variant]:.2f}  range {values[0]:.2f}-{values[-1]:.2f}"
            )
        for num, den in (("ft", "hand_ft"), ("ft", "ddp"), ("hand_ft", "hand_ddp"), ("ddp", "hand_ddp")):
            if num in results and den in results:
                # Paired: each round's run against the other variant's run of the same round (load drifts).
                paired = sorted(a[key] / b[key] for a, b in zip(results[num], results[den]))
                print(
                    f"{key}: {num} / {den} = {median[key][num] / median[key][den]:.3f} (of the medians); paired "
                    f"{statistics.median(paired):.3f} ({paired[0]:.3f}-{paired[-1]:.3f})"
                )
    if "hand_ft" in results and "hand_ddp" in results:
        fixed = median["cpu"]["hand_ft"] - median["cpu"]["hand_ddp"]
        print(f"torchft's own fixed cost per step (hand_ft - hand_ddp, CPU over 2 processes): {fixed:.2f} ms")
    if "ft" in results and "hand_ft" in results:
        ours = median["cpu"]["ft"] - median["cpu"]["hand_ft"]
        print(f"trainmesh's over torchft's hand-written loop (ft - hand_ft, CPU over 2 processes): {ours:.2f} ms")


VARIANTS = ("ddp", "ft", "hand_ft", "hand_ddp")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:])
    else:
        main()
