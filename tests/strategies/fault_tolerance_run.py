"""The program of test_fault_tolerance.py: one replica group of ``Trainer(fault_tolerance=...)``.

python fault_tolerance_run.py replica OUT LIGHTHOUSE GROUP ATTEMPT

Group 1's first attempt dies hard (os._exit) after step KILL_AT. Group 0 waits at step KILL_AT + 3
for the restarted group's Manager, and paces its steps (sleeps) until it has rejoined: a real run
does not need this, the test does so that the survivor is still training when the group comes back
(else it could finish first). Every step appends (global step, participants) to OUT/steps_GROUP_ATTEMPT;
the end writes the weights, the optimizer and scheduler state to OUT/final_GROUP.pt.
"""

import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import trainmesh as tm  # noqa: E402
from helpers.lightning_order import GlobalBatches  # noqa: E402
from trainmesh.strategies import DDPStrategy  # noqa: E402

STEPS, KILL_AT = 30, 6


class Net(tm.Module):
    def __init__(self, seed: int = 3):
        super().__init__()
        torch.manual_seed(seed)  # group 1 is built from another seed: it must start from group 0's weights
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.7)
        return [optimizer], [{"scheduler": scheduler, "interval": "step"}]


class Pace(tm.Callback):
    def __init__(self, out: Path, group: int, attempt: int):
        self.out, self.group, self.attempt = out, group, attempt

    def on_train_start(self, trainer, module):
        # Both Managers heartbeat before either asks for a quorum: the first quorum has both groups.
        (self.out / f"up_{self.group}_{self.attempt}").touch()
        while self.attempt == 0 and not all((self.out / f"up_{g}_0").exists() for g in (0, 1)):
            time.sleep(0.05)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        participants = trainer.strategy.manager.num_participants()
        with open(self.out / f"steps_{self.group}_{self.attempt}", "a") as f:
            f.write(f"{trainer.global_step} {participants} {os.getpid()}\n")
        if self.attempt == 0 and trainer.global_step == KILL_AT:  # both groups trained together so far
            torch.save({k: v.clone() for k, v in module.state_dict().items()}, self.out / f"at_kill_{self.group}.pt")
        if self.group == 1 and self.attempt == 0 and trainer.global_step == KILL_AT:
            os._exit(3)  # a hard crash: no shutdown, no goodbye to the lighthouse
        restarted = self.out / "up_1_1"
        if self.group == 0 and trainer.global_step == KILL_AT + 3:
            while not restarted.exists():
                time.sleep(0.05)
        if self.group == 0 and participants == 1 and restarted.exists():
            time.sleep(0.05)


def dataset() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=gen)
    return TensorDataset(x, x[:, :2].sum(1, keepdim=True))


def ddp(out: str) -> None:
    """The reference: plain ddp on 2 processes, the same model, data and steps up to KILL_AT."""
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=KILL_AT,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=str(Path(out) / "ddp"),
    )
    model = Net()
    trainer.fit(model, DataLoader(dataset(), batch_size=8, shuffle=True))
    if trainer.is_global_zero:
        torch.save(model.state_dict(), Path(out) / "ddp_at_kill.pt")


def replica(out: str, lighthouse: str, group: str, attempt: str) -> None:
    out_dir, g = Path(out), int(group)
    data = dataset()
    ft = tm.FaultTolerance(
        lighthouse, replica_group=g, num_replica_groups=2, host="127.0.0.1", timeout=timedelta(seconds=20)
    )
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        # Lightning's DDPStrategy registers a comm hook on CUDA only: on CPU its run is plain ddp, and so
        # is a replica group's (torchft's hook the only one), which the reference below is.
        strategy=DDPStrategy(ddp_comm_hook=default_hooks.fp16_compress_hook),
        fault_tolerance=ft,
        max_steps=STEPS,
        callbacks=[Pace(out_dir, g, int(attempt))],
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=str(out_dir / f"group{g}"),
    )
    model = Net(seed=3 + g)
    trainer.fit(model, DataLoader(data, batch_size=8, shuffle=True))
    optimizer = trainer.optimizers[0]
    torch.save(
        {
            "weights": model.state_dict(),
            "adam": optimizer.state_dict()["state"],
            "scheduler": trainer.lr_scheduler_configs[0].scheduler.state_dict(),
            "global_step": trainer.global_step,
        },
        out_dir / f"final_{g}.pt",
    )


FSDP_STEPS, FSDP_KILL_AT = 12, 4


def _whole(module) -> dict:
    """The module's weights as whole tensors (every process of the group must call it: a gather)."""
    return {
        k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
        for k, v in module.state_dict().items()
    }


class PaceGroup(tm.Callback):
    """Pace for a replica group of 2 fsdp processes: rank 0 logs and waits, process 1 of group 1's
    first attempt dies hard after step FSDP_KILL_AT and takes its group's other process with it
    (SIGKILL): what its launcher does too, but only after torch's 30 s SIGTERM grace, which that
    process, waiting in a collective with the dead one, never answers (30 s of the test idle)."""

    def __init__(self, out: Path, group: int, attempt: int):
        self.out, self.group, self.attempt = out, group, attempt

    def on_train_start(self, trainer, module):
        (self.out / f"pid_{self.group}_{self.attempt}_{trainer.global_rank}").write_text(str(os.getpid()))
        if trainer.global_rank == 0:
            (self.out / f"up_{self.group}_{self.attempt}").touch()
        while self.attempt == 0 and not all((self.out / f"up_{g}_0").exists() for g in (0, 1)):
            time.sleep(0.05)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        step, rank = trainer.global_step, trainer.global_rank
        participants = trainer.strategy.manager.num_participants()
        if rank == 0:
            with open(self.out / f"steps_{self.group}_{self.attempt}", "a") as f:
                f.write(f"{step} {participants} {os.getpid()}\n")
        if self.attempt == 0 and step == FSDP_KILL_AT:
            whole = _whole(module)
            if rank == 0:
                torch.save(whole, self.out / f"at_kill_{self.group}.pt")
                (self.out / f"saved_{self.group}").touch()
            if self.group == 1 and rank == 1:
                deadline = time.monotonic() + 120  # its weights at the kill, written first (a bound, no hang)
                while not (self.out / "saved_1").exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
                os.kill(int((self.out / "pid_1_0_0").read_text()), signal.SIGKILL)
                os._exit(3)  # a hard crash of one process; its launcher finds the group gone
        restarted = self.out / "up_1_1"
        if self.group == 0 and step == FSDP_KILL_AT + 2:
            while not restarted.exists():
                time.sleep(0.05)
        if self.group == 0 and participants == 1 and restarted.exists():
            time.sleep(0.05)


def one_process(out: str) -> None:
    """The reference for fsdp groups: one process at the global batch (2 groups x 2 processes x 8),
    up to FSDP_KILL_AT. The 4 processes are data-parallel ranks 0-3 of one shuffling sampler
    (seed 0, as the Trainer deals them): at step k it reads their 4 k-th batches together."""
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=FSDP_KILL_AT,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=str(Path(out) / "one"),
    )
    model = Net()
    order = GlobalBatches(len(dataset()), world=4, batch_size=8)
    trainer.fit(model, DataLoader(dataset(), batch_size=32, sampler=order))
    torch.save(model.state_dict(), Path(out) / "one_at_kill.pt")


def fsdp_replica(out: str, lighthouse: str, group: str, attempt: str) -> None:
    """One replica group of 2 processes sharding the model (fsdp), replicated across groups."""
    out_dir, g = Path(out), int(group)
    ft = tm.FaultTolerance(
        lighthouse, replica_group=g, num_replica_groups=2, host="127.0.0.1", timeout=timedelta(seconds=20)
    )
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="fsdp",
        fault_tolerance=ft,
        max_steps=FSDP_STEPS,
        callbacks=[PaceGroup(out_dir, g, int(attempt))],
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=str(out_dir / f"fsdp_group{g}"),
    )
    model = Net(seed=3 + g)
    trainer.fit(model, DataLoader(dataset(), batch_size=8, shuffle=False))
    optimizer = trainer.optimizers[0]
    local = {k: v.to_local() if hasattr(v, "to_local") else v for k, v in model.state_dict().items()}
    adam = {
        i: {k: v.to_local() if hasattr(v, "to_local") else v for k, v in s.items()}
        for i, s in optimizer.state_dict()["state"].items()
    }
    torch.save(
        {"weights": local, "adam": adam, "global_step": trainer.global_step},
        out_dir / f"final_fsdp_{g}_{trainer.global_rank}.pt",
    )


PROGRAMS = {"replica": replica, "ddp": ddp, "fsdp_replica": fsdp_replica, "one_process": one_process}

if __name__ == "__main__":
    PROGRAMS[sys.argv[1]](*sys.argv[2:])
