"""Bytes and loss of semi-synchronous training (LocalSGD, DiLoCo) against per-step gradient averaging,
on a tiny GPT-like language model over generated tokens, CPU, two replica groups of one process.

Variants: ``every_step`` (ddp replica groups: every step's gradient buckets all-reduced across the
groups, the bytes plain ddp's buckets carry), and ``local_sgd`` / ``diloco`` at H = 1, 10, 100
(``FaultTolerance(sync=..., sync_every=H)``). Every variant: the same model built from the same
seed, the same data (each group reads its half), AdamW inside, the same number of steps (a multiple
of every H, so each run ends right after a sync), so the same number of samples. Each variant runs
in fresh processes (a lighthouse here with min_replicas=2, so every sync has both groups).

Measured in each group's process:
- bytes: what the group hands to its cross-group process group's all-reduce (torchft's gloo group:
  the sum of the tensors' nbytes per collective, counted by wrapping that group's ``allreduce``
  from the first forward; the one copy of the first group's weights at the start is left out).
  Per step = total / steps.
  A ring all-reduce of N bytes over 2 groups sends N bytes out of each group and receives N.
- loss: group 0's model after the last step, evaluated (cross-entropy, nats/token) on held-out
  sequences from the same generator;
- CPU seconds (``process_time``, summed over the two groups) and wall seconds (group 0), from the
  start to the end of training.

    python benchmarks/semi_sync.py [--steps 200] [--variants every_step,local_sgd:10,diloco:100]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

VOCAB, SEQ, BATCH, WIDTH = 64, 32, 8, 64
VARIANTS = ["every_step", *(f"{s}:{h}" for s in ("local_sgd", "diloco") for h in (1, 10, 100))]


def tokens(count: int, seed: int) -> torch.Tensor:
    """``count`` sequences from a fixed random bigram source (each token has a few likely successors):
    something a small LM learns over a few hundred steps."""
    gen = torch.Generator().manual_seed(1234)  # the source: the same for training and held-out data
    logits = torch.randn(VOCAB, VOCAB, generator=gen) * 3.0
    probs = torch.softmax(logits, dim=1)
    draw = torch.Generator().manual_seed(seed)
    seqs = torch.empty(count, SEQ + 1, dtype=torch.long)
    seqs[:, 0] = torch.randint(VOCAB, (count,), generator=draw)
    for t in range(SEQ):
        seqs[:, t + 1] = torch.multinomial(probs[seqs[:, t]], 1, generator=draw).squeeze(1)
    return seqs


class TinyGPT(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.position = torch.nn.Parameter(torch.randn(SEQ, WIDTH) * 0.02)
        layer = torch.nn.TransformerEncoderLayer(WIDTH, 4, 2 * WIDTH, dropout=0.0, batch_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.head(self.blocks(self.embed(x) + self.position, mask=mask, is_causal=True))

    def loss(self, seqs: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self(seqs[:, :-1]).reshape(-1, VOCAB), seqs[:, 1:].reshape(-1))

    def training_step(self, batch, batch_idx):
        return self.loss(batch[0])

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


class Meter(tm.Callback):
    """Counts the bytes handed to the cross-group group's all-reduce and the CPU/wall time of training."""

    def __init__(self, out: Path, group: int) -> None:
        self.out, self.group, self.sent, self.collectives = out, group, 0, 0

    def on_train_start(self, trainer, module):
        pg = trainer.strategy.manager._pg  # torchft's process group across the replica groups
        allreduce = pg.allreduce

        def counted(tensors, *args, **kwargs):
            self.sent += sum(t.numel() * t.element_size() for t in tensors)
            self.collectives += 1
            return allreduce(tensors, *args, **kwargs)

        pg.allreduce = counted  # this benchmark's own measurement of torchft's group
        # Counted from the first forward: every_step groups copy the first group's weights inside
        # their first step, before it (the semi-synchronous ones at setup, before training).
        self.first = module.register_forward_pre_hook(lambda *_: self._restart())
        self.start = (time.process_time(), time.perf_counter())

    def _restart(self) -> None:
        self.sent, self.collectives = 0, 0
        self.first.remove()

    def on_train_end(self, trainer, module):
        cpu, wall = time.process_time() - self.start[0], time.perf_counter() - self.start[1]
        result = {"cpu": cpu, "wall": wall, "bytes": self.sent, "collectives": self.collectives}
        result["steps"] = trainer.global_step
        if self.group == 0:
            with torch.no_grad():
                result["loss"] = float(module.loss(tokens(256, seed=99)))
        (self.out / f"group{self.group}.json").write_text(json.dumps(result))


def worker(variant: str, out: str, steps: str, lighthouse: str, group: str) -> None:
    sync, _, every = variant.partition(":")
    ft = tm.FaultTolerance(
        lighthouse,
        replica_group=int(group),
        num_replica_groups=2,
        min_replicas=2,
        host="127.0.0.1",
        sync=sync,
        sync_every=int(every) if every else None,
    )
    data = TensorDataset(tokens(BATCH * 2 * int(steps), seed=0))
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        strategy="ddp",
        fault_tolerance=ft,
        max_steps=int(steps),
        callbacks=[Meter(Path(out), int(group))],
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=out,
    )
    trainer.fit(TinyGPT(), DataLoader(data, batch_size=BATCH))


def run(variant: str, steps: int) -> dict[str, float]:
    """One fresh run of ``variant``: two group processes and a lighthouse."""
    from torchft.coordination import LighthouseServer

    with tempfile.TemporaryDirectory() as out:
        lighthouse = LighthouseServer(bind="127.0.0.1:0", min_replicas=2)
        env = {**os.environ, "RUST_LOG": "warn", "OMP_NUM_THREADS": "1"}
        me = [sys.executable, __file__, "--worker", variant, out, str(steps), lighthouse.address()]
        procs = [subprocess.Popen([*me, str(g)], env=env, stderr=subprocess.DEVNULL) for g in (0, 1)]
        codes = [p.wait(timeout=1200) for p in procs]
        lighthouse.shutdown()
        assert codes == [0, 0], f"{variant} exited with {codes}"
        groups = [json.loads((Path(out) / f"group{g}.json").read_text()) for g in (0, 1)]
    return {
        "bytes_per_step": groups[0]["bytes"] / groups[0]["steps"],
        "collectives_per_step": groups[0]["collectives"] / groups[0]["steps"],
        "loss": groups[0]["loss"],
        "cpu": groups[0]["cpu"] + groups[1]["cpu"],
        "wall": groups[0]["wall"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200, help="a multiple of every H (each run ends at a sync)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    parameters = sum(p.numel() for p in TinyGPT().parameters())
    samples = args.steps * BATCH * 2
    print(f"TinyGPT: {parameters} parameters ({4 * parameters} bytes fp32); {args.steps} steps, {samples} sequences")
    rows = []
    for variant in args.variants.split(","):
        result = run(variant, args.steps)
        rows.append((variant, result))
        print(f"{variant}: {result}", flush=True)
    base = next((r["bytes_per_step"] for v, r in rows if v == "every_step"), None)
    print()
    print("| mode | H | bytes/step/group | vs every step | all-reduces/step | held-out loss | CPU s | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for variant, r in rows:
        sync, _, every = variant.partition(":")
        ratio = f"{r['bytes_per_step'] / base:.3f}" if base else "-"
        print(
            f"| {sync} | {every or 1} | {r['bytes_per_step']:,.0f} | {ratio} | {r['collectives_per_step']:.2f} "
            f"| {r['loss']:.3f} | {r['cpu']:.1f} | {r['wall']:.1f} |"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:])
    else:
        main()
