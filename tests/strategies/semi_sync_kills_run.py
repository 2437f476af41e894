"""The program of test_semi_sync.py's kill tests: two replica groups (sync_every=H); group 1 dies
and is started again while group 0 trains on, following PLANS[SYNC], one entry per attempt:
``in_sync``: SIGKILLed in the middle of its second sync (right after its first all-reduce of the
sync has gone out, so the survivor's sync has started with it); ``between``: SIGKILLed between two
syncs (one local step after its second sync with the survivor); ``end``: trains to the end. Each
attempt after the first rejoins at the survivor's next sync.

python semi_sync_kills_run.py survivor OUT LIGHTHOUSE SYNC
python semi_sync_kills_run.py doomed OUT LIGHTHOUSE SYNC

SYNC: ``diloco``, ``local_sgd``, or ``streaming`` (DiLoCo with fragments=2 and sync_every=2H: a
fragment synced every H steps, in turn).

The model, data and waits are fault_tolerance_kills_run.py's (the per-step groups' kill trials);
as there, group 1 imports once and forks one process per attempt; attempt K+1 starts once the
survivor has synced alone after attempt K died. Files under OUT:
- ``syncs_G``: one line per sync step: global step, participants, torchft's step count, errored, pid;
- ``killing_K``: attempt K is about to SIGKILL itself (the global step); ``dead_K``: it died (exit status);
- ``alone_K``: the survivor synced alone after attempt K died; ``up_1_K``: attempt K is training;
- ``failed_K``: attempt K's error, if it raised one;
- ``end``: the (sync) step both groups stop at, written once the last attempt has synced with the survivor;
- ``rejoined_G.pt``: each group's weights after the last attempt's rejoin sync;
- ``final_G.pt``: each group's weights and step counts at the end (group 1's: the last attempt's).
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
# group 1's attempts, by SYNC ("streaming": DiLoCo over 2 fragments, one synced every EVERY steps in turn)
PLANS = {"diloco": ("in_sync", "between", "end"), "local_sgd": ("between", "end"), "streaming": ("between", "end")}


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
    def __init__(self, out: Path, attempts: int):
        self.out, self.attempts, self.alone, self.deaths = out, attempts, False, 0

    def setup(self, trainer, module, stage):
        _managers_up(self.out, "manager_0", "manager_1_0")

    def on_train_start(self, trainer, module):
        (self.out / "up_0").touch()
        _wait_for(self.out / "up_1_0")

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        end = self.out / "end"
        if trainer.global_step % EVERY:
            if self.alone and not end.exists():
                time.sleep(0.05)  # paced until the restarted group is back
            return
        participants = _log_sync(self.out, 0, trainer)
        self.alone = participants == 1
        if self.alone and (self.out / f"dead_{self.deaths}").exists():
            (self.out / f"alone_{self.deaths}").touch()  # the next attempt starts now
            self.deaths += 1
        if participants == 2 and self.deaths == self.attempts - 1 and not end.exists():
            torch.save(module.state_dict(), self.out / "rejoined_0.pt")  # the last attempt's rejoin sync
            (self.out / "end.tmp").write_text(str(trainer.global_step + 3 * EVERY))
            (self.out / "end.tmp").rename(end)
        _stop_at_end(self.out, trainer)


class Doomed(tm.Callback):
    """An attempt that SIGKILLs itself as ``plan`` says (PLANS), or trains to the end."""

    def __init__(self, out: Path, attempt: int, plan: str):
        self.out, self.attempt, self.plan, self.batches, self.together = out, attempt, plan, 0, 0

    def setup(self, trainer, module, stage):
        _managers_up(self.out, f"manager_1_{self.attempt}", "manager_0" if self.attempt == 0 else None)

    def on_train_start(self, trainer, module):
        (self.out / f"up_1_{self.attempt}").touch()
        _wait_for(self.out / "up_0")
        if self.plan == "in_sync":
            manager = trainer.strategy.manager
            send = manager.allreduce

            def allreduce_then_die(tensor, *args, **kwargs):  # the kill point: torchft's own all-reduce
                work = send(tensor, *args, **kwargs)
                if self.batches == 2 * EVERY:
                    (self.out / f"killing_{self.attempt}").write_text(str(trainer.global_step))
                    os.kill(os.getpid(), signal.SIGKILL)
                return work

            manager.allreduce = allreduce_then_die  # torchft's Manager, in this test program only

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.batches += 1

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step % EVERY == 0:
            self.together += _log_sync(self.out, 1, trainer) == 2
            if self.plan == "end" and self.together == 1:
                torch.save(module.state_dict(), self.out / "rejoined_1.pt")  # its rejoin sync
        elif self.plan == "between" and self.together == 2:  # one local step after a sync
            (self.out / f"killing_{self.attempt}").write_text(str(trainer.global_step))
            os.kill(os.getpid(), signal.SIGKILL)
        _stop_at_end(self.out, trainer)


def train(out: Path, lighthouse: str, group: int, callback, sync: str) -> None:
    ft = tm.FaultTolerance(
        lighthouse, replica_group=group, num_replica_groups=2, host="127.0.0.1", timeout=timedelta(seconds=20),
        sync="diloco" if sync == "streaming" else sync, sync_every=2 * EVERY if sync == "streaming" else EVERY,
        fragments=2 if sync == "streaming" else 1,
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


def survivor(out: str, lighthouse: str, sync: str) -> None:
    train(Path(out), lighthouse, 0, Survivor(Path(out), len(PLANS[sync])), sync)


def doomed(out: str, lighthouse: str, sync: str) -> None:
    out_dir = Path(out)
    import torch._dynamo  # noqa: F401  (DDP's construction imports it: once, before the forks)
    import torchft  # noqa: F401

    plans = PLANS[sync]
    for attempt, plan in enumerate(plans):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                train(out_dir, lighthouse, 1, Doomed(out_dir, attempt, plan), sync)
            except BaseException as err:
                import traceback

                traceback.print_exc()
                (out_dir / f"failed_{attempt}").write_text(str(err))
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        print(f"attempt {attempt} ended with {code}", flush=True)
        if plan == "end":
            sys.exit(0 if code == 0 else f"attempt {attempt} was to train to the end, but ended with {code}")
        if code != -signal.SIGKILL or not (out_dir / f"killing_{attempt}").exists():
            sys.exit(f"attempt {attempt} was to die by SIGKILL, but ended with {code}")
        (out_dir / f"dead_{attempt}").write_text(str(code))
        _wait_for(out_dir / f"alone_{attempt}")


if __name__ == "__main__":
    {"survivor": survivor, "doomed": doomed}[sys.argv[1]](*sys.argv[2:])
