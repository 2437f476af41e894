"""Leg of test_preemption and test_restarts: a fit as users start it (``python preemption_run.py``,
under torchrun, or as SLURM's tasks), with what makes an exact resume hard: dropout, a shuffled
loader, momentum and a step LR schedule (tests/helpers/models.py's DropoutNet).

    python preemption_run.py ROOT [--devices 2] [--max-steps 60] [--max-restarts N] [--strategy ddp_fork]
        [--signal SIGTERM --at STEP --to agent|workers|self] [--exchange-every SECONDS] [--die-at STEP]
        [--async-saves]

Writes, under ROOT: ``weights.pt`` (rank 0, when fit returns), ``stopped.rank{r}.json`` (each rank,
when fit raises Preempted: the step and checkpoint it reports), ``started.<restart>.json`` (rank 0:
the step each attempt starts at), ``died.json`` (the rank that --die-at kills, on the first
attempt only). The run's exit status is the script's.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for helpers
import trainmesh as tm  # noqa: E402
from helpers.models import DropoutNet, random_classification  # noqa: E402
from trainmesh.callbacks.model_checkpoint import ModelCheckpoint  # noqa: E402
from trainmesh.supervision import stop_agreement  # noqa: E402

OPTIONS = "PREEMPTION_RUN_OPTIONS"  # the test's options, in the environment (preemption_helpers.test_options)

CHECKPOINT_EVERY = 8  # steps: the periodic last.ckpt a restart resumes from


class SendSignal(tm.Callback):
    """After step ``at``, rank 0 sends ``sig`` to the agent that started the workers, to every
    worker (as SLURM signals its tasks), or to itself (one process); from then on every rank's step takes 50 ms more, so that the run cannot end before
    the signal has travelled (the agent forwards it)."""

    def __init__(self, sig: signal.Signals, at: int, to: str) -> None:
        self.sig, self.at, self.to = sig, at, to
        self.workers: list[int] = []

    def on_train_start(self, trainer, module):
        self.workers = trainer.runtime.all_gather_object(os.getpid())

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.at and trainer.is_global_zero:
            targets = {"agent": [os.getppid()], "workers": self.workers, "self": [os.getpid()]}[self.to]
            for pid in targets:
                os.kill(pid, self.sig)
        if trainer.global_step >= self.at:
            time.sleep(0.05)


class RecordStart(tm.Callback):
    """Rank 0 writes the step each attempt starts training at (``started.<restart count>.json``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def on_train_start(self, trainer, module):
        if trainer.is_global_zero:
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / f"started.{attempt}.json").write_text(json.dumps({"global_step": trainer.global_step}))


class DieOnce(tm.Callback):
    """The last rank dies (no clean-up, as in a crash) before step ``at`` on the first attempt."""

    def __init__(self, root: Path, at: int) -> None:
        self.root, self.at = root, at

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if first_attempt and trainer.global_step == self.at and trainer.global_rank == trainer.world_size - 1:
            (self.root / "died.json").write_text(json.dumps({"step": trainer.global_step, "pid": os.getpid()}))
            os._exit(3)


def build_trainer(
    root: Path,
    *,
    devices: int,
    max_steps: int,
    max_restarts: int = 0,
    strategy: str = "ddp",
    callbacks: list[tm.Callback] = (),
    async_saves: bool = False,
) -> tm.Trainer:
    """The run's Trainer; the tests build the uninterrupted reference run with it too."""
    restarts = {"max_restarts": max_restarts} if max_restarts else {}  # only where asked: older code lacks it
    if async_saves:  # imported only where asked, as above
        from trainmesh.checkpoint import AsyncCheckpointIO

        restarts["plugins"] = [AsyncCheckpointIO()]
    return tm.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=strategy if devices > 1 else "auto",
        max_steps=max_steps,
        default_root_dir=root,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **restarts,
        callbacks=[
            ModelCheckpoint(save_last=True, save_top_k=0, every_n_train_steps=CHECKPOINT_EVERY),
            RecordStart(root),
            *callbacks,
        ],
    )


def train_loader() -> DataLoader:
    return DataLoader(random_classification(), batch_size=8, shuffle=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--max-restarts", type=int, default=0)
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--signal", default=None)
    parser.add_argument("--at", type=int, default=0)
    parser.add_argument("--to", default="agent")
    parser.add_argument("--die-at", type=int, default=None)
    parser.add_argument("--async-saves", action="store_true", help="Trainer(plugins=[AsyncCheckpointIO()])")
    parser.add_argument(
        "--exchange-every",
        type=float,
        default=None,
        help="seconds of training between the ranks' stop-request exchanges (0: every step)",
    )
    # the test's options come in the environment (preemption_helpers.test_options): every run has one command line
    args = parser.parse_args([*sys.argv[1:], *shlex.split(os.environ.get(OPTIONS, ""))])
    if args.exchange_every is not None:
        # The library's default (a quarter second) lets these few-millisecond steps run on for up
        # to 200 steps before the ranks agree to stop: the signal tests keep it to a few steps.
        stop_agreement.EXCHANGE_EVERY_SECONDS = args.exchange_every
    callbacks: list[tm.Callback] = []
    if args.signal:
        callbacks.append(SendSignal(signal.Signals[args.signal], args.at, args.to))
    if args.die_at is not None:
        callbacks.append(DieOnce(args.root, args.die_at))
    tm.seed_everything(0)
    model = DropoutNet()
    trainer = build_trainer(
        args.root,
        devices=args.devices,
        max_steps=args.max_steps,
        strategy=args.strategy,
        max_restarts=args.max_restarts,
        callbacks=callbacks,
        async_saves=args.async_saves,
    )
    try:
        trainer.fit(model, train_loader())
    except SystemExit as stop:
        # trainmesh's Preempted (a SystemExit: status 75) in a worker; not the agent's own exit,
        # which ends this script in the process that started the workers.
        if hasattr(stop, "step"):
            report = {
                "step": stop.step,
                "checkpoint": stop.checkpoint,
                "status": stop.code,
                "global_step": trainer.global_step,
            }
            (args.root / f"stopped.rank{trainer.global_rank}.json").write_text(json.dumps(report))
        raise
    if trainer.is_global_zero:
        torch.save(model.state_dict(), args.root / "weights.pt")


if __name__ == "__main__":
    # A last resort should the test's own clean-up fail: no process of this leg lives past 170 s.
    faulthandler.dump_traceback_later(170, exit=True)
    main()
