"""The program of test_semi_sync.py's kill test: two DiLoCo replica groups (sync_every=H); group 1
is SIGKILLed in the middle of its second sync (right after its first pseudo-gradient all-reduce has
gone out, so the survivor's sync has started with it) and started again while group 0 trains on;
the restarted group meets the survivor inside a sync and is refused (joining a semi-synchronous run
in progress is not supported yet), and the survivor trains on to the end.

python semi_sync_kills_run.py survivor OUT LIGHTHOUSE
python semi_sync_kills_run.py doomed OUT LIGHTHOUSE

The model, data and waits are fault_tolerance_kills_run.py's (the per-step groups' kill trials);
as there, group 1 imports once and forks one process per attempt: attempt 0 dies in its sync,
attempt 1 (started once the survivor has synced alone) is refused. Files under OUT:
- ``syncs_G``: one line per sync step: global step, participants, torchft's step count, errored, pid;
- ``killing_0``: attempt 0 is about to SIGKILL itself inside a sync; ``dead_0``: it died (exit status);
- ``alone_0``: the survivor synced alone after the death; ``up_1_0``: attempt 0 is training;
- ``refused_1``: attempt 1's error; ``rejoin_done``: attempt 1 ended (its exit status);
- ``end``: the (sync) step the survivor stops at, written once attempt 1 has ended;
- ``final_0.pt``: the survivor's weights and step counts at the end.
"""

import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
from fault_tolerance_kills_run import Net, _wait_for, dataset
from torch.utils.data import DataLoader

import trainmesh as tm

EVERY = 3  # local steps between syncs
MAX_STEPS = 3000  # a bound only: the run ends at OUT/end


def _log_sync(out: Path, group: int, trainer) -> int:
    """After a sync step: who took part, whether it failed (0 participants: none was formed)."""
    manager = trainer.strategy.manager
    participants = manager.num_participants()
    errored = int(manager.errored() is not None)
    with open(out / f"syncs_{group}", "a") as f:
        f.write(f"{trainer.global_step} {participants} {manager.current_step()} {errored} {os.getpid()}\n")
    return participants


def _stop_at_end(out: Path, trainer) -> None:
    end = out / "end"
    if end.exists() and trainer.global_step >= int(end.read_text()):
        trainer.should_stop = True


def _managers_up(out: Path, mine: str, other: str | None) -> None:
    """Called from the callbacks' setup: after this group's Manager has started, before its first
    quorum. A group whose Manager is the only live one gets a quorum of itself at once (the
    lighthouse waits only for live groups), and would be training when the other asks for one."""
    (out / mine).touch()
    if other is not None:
        _wait_for(out / other)


class Survivor(tm.Callback):
    def __init__(self, out: Path):
        self.out, self.alone = out, False

    def setup(self, trainer, module, stage):
        _managers_up(self.out, "manager_0", "manager_1_0")

    def on_train_start(self, trainer, module):
        (self.out / "up_0").touch()
        _wait_for(self.out / "up_1_0")

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step % EVERY:
            if self.alone and not (self.out / "end").exists():
                time.sleep(0.05)  # paced until the restarted group has come and gone
            return
        participants = _log_sync(self.out, 0, trainer)
        if not self.alone and participants == 1 and (self.out / "dead_0").exists():
            (self.out / "alone_0").touch()
            self.alone = True
        end = self.out / "end"
        if (self.out / "rejoin_done").exists() and not end.exists():
            (self.out / "end.tmp").write_text(str(trainer.global_step + 3 * EVERY))
            (self.out / "end.tmp").rename(end)
        _stop_at_end(self.out, trainer)


class Doomed(tm.Callback):
    """Attempt 0 SIGKILLs itself inside the all-reduce of its second sync; attempt 1 trains on."""

    def __init__(self, out: Path, attempt: int):
        self.out, self.attempt, self.batches = out, attempt, 0

    def setup(self, trainer, module, stage):
        _managers_up(self.out, f"manager_1_{self.attempt}", "manager_0" if self.attempt == 0 else None)

    def on_train_start(self, trainer, module):
        (self.out / f"up_1_{self.attempt}").touch()
        _wait_for(self.out / "up_0")
        if self.attempt == 0:
            manager = trainer.strategy.manager
            send = manager.allreduce

            def allreduce_then_die(tensor, *args, **kwargs):  # the kill point: torchft's own all-reduce
                work = send(tensor, *args, **kwargs)
                if self.batches == 2 * EVERY:
                    (self.out / "killing_0").write_text(str(trainer.global_step))
                    os.kill(os.getpid(), signal.SIGKILL)
                return work

            manager.allreduce = allreduce_then_die  # torchft's Manager, in this test program only

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.batches += 1

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step % EVERY == 0:
            _log_sync(self.out, 1, trainer)
        _stop_at_end(self.out, trainer)


def train(out: Path, lighthouse: str, group: int, callback) -> None:
    ft = tm.FaultTolerance(
        lighthouse, replica_group=group, num_replica_groups=2, host="127.0.0.1", timeout=timedelta(seconds=20),
        sync="diloco", sync_every=EVERY,
    )  # fmt: skip
    model = Net(seed=3 + group)
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        strategy="ddp",
        fault_tolerance=ft,
        max_steps=MAX_STEPS,
        callbacks=[callback],
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=str(out / f"group{group}"),
    )
    trainer.fit(model, DataLoader(dataset(), batch_size=8, shuffle=True))
    manager = trainer.strategy.manager
    torch.save(
        {"weights": model.state_dict(), "global_step": trainer.global_step, "committed": manager.current_step()},
        out / f"final_{group}.pt",
    )


def survivor(out: str, lighthouse: str) -> None:
    train(Path(out), lighthouse, 0, Survivor(Path(out)))


def doomed(out: str, lighthouse: str) -> None:
    out_dir = Path(out)
    import torch._dynamo  # noqa: F401  (DDP's construction imports it: once, before the forks)
    import torchft  # noqa: F401

    for attempt in (0, 1):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                train(out_dir, lighthouse, 1, Doomed(out_dir, attempt))
            except BaseException as err:
                import traceback

                traceback.print_exc()
                (out_dir / f"refused_{attempt}").write_text(str(err))
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        print(f"attempt {attempt} ended with {code}", flush=True)
        if attempt == 1:
            (out_dir / "rejoin_done").write_text(str(code))
            sys.exit(0 if code == 1 else f"attempt 1 was to be refused, but ended with {code}")
        if code != -signal.SIGKILL or not (out_dir / "killing_0").exists():
            sys.exit(f"attempt 0 was to die by SIGKILL inside its second sync, but ended with {code}")
        (out_dir / "dead_0").write_text(str(code))
        _wait_for(out_dir / "alone_0")


if __name__ == "__main__":
    {"survivor": survivor, "doomed": doomed}[sys.argv[1]](*sys.argv[2:])
