"""The per-step cost of Trainer(fault_tolerance=...) (torchft) against plain strategy="ddp", on CPU.

Both train the 784-128-10 MLP, batch 16 per process, Adam, for --steps steps on 2 processes:
plain ddp (one gloo group of 2, DDP's all-reduce) and 2 torchft replica groups of 1 process (a
lighthouse in this process, min_replicas=2 so that every step has both; per step: a quorum, the
all-reduce over torchft's gloo group, should_commit). Each run starts fresh processes; the variants
alternate, in turn first, --rounds times. A callback takes each rank's CPU time (process_time: the
Rust threads of torchft's Manager and the quorum thread included; each group gets
OMP_NUM_THREADS = cores / 2, as ddp's launcher sets for its 2 workers) and wall time from step --warmup
to the end. Printed: CPU ms per step summed over the 2 ranks, wall ms per step (rank 0), median and
range over the rounds. Needs torchft (pip install torchft).

    python benchmarks/fault_tolerance_overhead.py [--steps 300] [--warmup 30] [--rounds 5]
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
from torch.utils.data import DataLoader, TensorDataset

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


def run(variant: str, steps: int, warmup: int) -> dict[str, float]:
    """One fresh run: CPU ms per step summed over the ranks, wall ms per step of the first rank."""
    with tempfile.TemporaryDirectory() as out:
        me = [sys.executable, __file__, "--worker", variant, out, str(steps), str(warmup)]
        env = {**os.environ, "RUST_LOG": "warn"}
        if variant == "ft":
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
        else:
            codes = [subprocess.run(me, env=env, stderr=subprocess.DEVNULL, timeout=600).returncode]
        assert codes == [0] * len(codes), f"{variant} exited with {codes}"
        ranks = [json.loads(p.read_text()) for p in sorted(Path(out).glob("*.json"))]
    assert len(ranks) == 2, ranks
    return {
        "cpu": 1000 * sum(r["cpu"] for r in ranks) / ranks[0]["steps"],
        "wall": 1000 * ranks[0]["wall"] / ranks[0]["steps"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"ddp": [], "ft": []}
    for round_ in range(args.rounds):
        for variant in ("ddp", "ft") if round_ % 2 == 0 else ("ft", "ddp"):
            results[variant].append(run(variant, args.steps, args.warmup))
            print(f"round {round_} {variant}: {results[variant][-1]}", flush=True)
    for key in ("cpu", "wall"):
        for variant, runs in results.items():
            values = sorted(r[key] for r in runs)
            print(
                f"{key} ms/step {variant:>4}: median {statistics.median(values):.2f}  range {values[0]:.2f}-{values[-1]:.2f}"
            )
        ratio = statistics.median(r[key] for r in results["ft"]) / statistics.median(r[key] for r in results["ddp"])
        print(f"{key}: ft / ddp = {ratio:.2f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:])
    else:
        main()
