"""The program of test_fault_tolerance.py's kill trials: ddp replica groups whose second group is
SIGKILLed in the middle of a step, at a chosen point, again and again within one run.

python fault_tolerance_kills_run.py survivor OUT LIGHTHOUSE PLAN
python fault_tolerance_kills_run.py doomed OUT LIGHTHOUSE PLAN

PLAN is a comma-separated list of kill points, one per trial: ``forward`` (inside the model's
forward, once the step's quorum is formed), ``backward`` (inside backward, before the gradient
all-reduce), ``allreduce+MS`` (MS
milliseconds after the last gradient is computed: around the all-reduce), ``step+MS`` (MS
milliseconds after the batch starts: anywhere in the step), ``after_backward`` (after the
all-reduce, before the commit). Group 1 ("doomed") imports everything once, then forks one process
per attempt: attempt k < len(PLAN) SIGKILLs itself at PLAN[k] during its KILL_BATCH-th batch, and
the attempt after the last trains to the end (forking keeps a restart cheap: no import).
Group 0 ("survivor") trains through every trial. Files under OUT:
- ``steps_G``: one line per step: global step, participants, committed steps, errored, pid;
- ``dead_K``: attempt K died (written by the doomed group's parent, with the exit status);
- ``alone_K``: the survivor trained alone twice after attempt K died (the next attempt starts then);
- ``end``: the step both groups stop at (written once the last attempt trains with the survivor);
- ``final_G.pt``: the weights, Adam state and step counts at the end.
"""

import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

KILL_BATCH = 3  # an attempt's third batch: it has healed (first) and trained with the survivor (second)
MAX_STEPS = 3000  # a bound only: the run ends at OUT/end
PATIENCE = 300  # seconds any wait for the other group may take before the program gives up


class Net(tm.Module):
    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + PATIENCE
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {PATIENCE} s")
        time.sleep(0.02)


def _log_step(out: Path, group: int, trainer) -> int:
    manager = trainer.strategy.manager
    participants = manager.num_participants()
    errored = int(manager.errored() is not None)
    with open(out / f"steps_{group}", "a") as f:
        f.write(f"{trainer.global_step} {participants} {manager.current_step()} {errored} {os.getpid()}\n")
    return participants


def _stop_at_end(out: Path, trainer) -> None:
    end = out / "end"
    if end.exists() and trainer.global_step >= int(end.read_text()):
        trainer.should_stop = True


class Survivor(tm.Callback):
    """Group 0: trains through every trial; after each death it trains alone for two steps, then
    lets the next attempt start and paces its steps until that attempt trains with it again."""

    def __init__(self, out: Path, trials: int):
        self.out, self.trials = out, trials
        self.deaths = 0  # trials whose death this group has trained alone through
        self.alone = 0  # steps trained alone since the latest death

    def on_train_start(self, trainer, module):
        (self.out / "up_0").touch()
        _wait_for(self.out / "up_1_0")  # both Managers are up before the first quorum

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        participants = _log_step(self.out, 0, trainer)
        if participants == 1 and (self.out / f"dead_{self.deaths}").exists():
            self.alone += 1
            if self.alone == 2:
                (self.out / f"alone_{self.deaths}").touch()
                self.deaths, self.alone = self.deaths + 1, 0
                _wait_for(self.out / f"up_1_{self.deaths}")
        if participants == 1:
            time.sleep(0.05)  # paced while the restarted attempt heals, so the run cannot end first
        end = self.out / "end"
        if participants == 2 and self.deaths == self.trials and not end.exists():
            (self.out / "end.tmp").write_text(str(trainer.global_step + 3))
            (self.out / "end.tmp").rename(end)
        _stop_at_end(self.out, trainer)


class Doomed(tm.Callback):
    """Group 1's attempt: arms its kill point at its KILL_BATCH-th batch."""

    def __init__(self, out: Path, attempt: int, point: str | None, module: Net):
        self.out, self.attempt, self.point = out, attempt, point
        self.batches, self.armed = 0, False
        layers = module.net
        # The kill points inside the model: the last layer's forward; its weight's gradient (the
        # middle of backward); the first layer's weight's gradient, the last one computed.
        layers[2].register_forward_pre_hook(lambda *_: self._maybe_kill("forward"))
        layers[2].weight.register_hook(lambda grad: self._maybe_kill("backward"))
        layers[0].weight.register_hook(lambda grad: self._maybe_kill("allreduce"))

    def _maybe_kill(self, where: str) -> None:
        if not self.armed or self.point is None or self.point.split("+")[0] != where:
            return
        delay = float(self.point.split("+")[1]) / 1000 if "+" in self.point else 0.0
        if where in ("forward", "backward"):
            # Once the step's quorum has both groups (it is formed in torchft's thread while the
            # forward runs): a kill before it reaches the lighthouse is one between two steps.
            self.manager.wait_quorum()
        (self.out / f"killing_{self.attempt}").write_text(self.point)
        kill = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL))
        kill.start()
        if delay == 0:
            kill.join()

    def on_train_start(self, trainer, module):
        self.manager = trainer.strategy.manager
        (self.out / f"up_1_{self.attempt}").touch()
        _wait_for(self.out / "up_0")

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.batches += 1
        self.armed = self.batches == KILL_BATCH
        self._maybe_kill("step")

    def on_after_backward(self, trainer, module):
        self._maybe_kill("after_backward")

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        _log_step(self.out, 1, trainer)
        _stop_at_end(self.out, trainer)


def dataset() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(512, 8, generator=gen)
    return TensorDataset(x, x[:, :2].sum(1, keepdim=True))


def train(out: Path, lighthouse: str, group: int, make_callback) -> None:
    ft = tm.FaultTolerance(
        lighthouse, replica_group=group, num_replica_groups=2, host="127.0.0.1", timeout=timedelta(seconds=30)
    )
    model = Net(seed=3 + group)
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        strategy="ddp",
        fault_tolerance=ft,
        max_steps=MAX_STEPS,
        callbacks=[make_callback(model)],
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
        {
            "weights": model.state_dict(),
            "adam": trainer.optimizers[0].state_dict()["state"],
            "global_step": trainer.global_step,
            "committed": manager.current_step() if manager is not None else None,
        },
        out / f"final_{group}.pt",
    )


def survivor(out: str, lighthouse: str, plan: str) -> None:
    trials = len(plan.split(","))
    train(Path(out), lighthouse, 0, lambda model: Survivor(Path(out), trials))


def _attempt(out: Path, lighthouse: str, attempt: int, point: str | None) -> None:
    """One attempt of group 1, in a forked child: it never returns."""
    code = 0
    try:
        train(out, lighthouse, 1, lambda model: Doomed(out, attempt, point, model))
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def doomed(out: str, lighthouse: str, plan: str) -> None:
    """Forks attempt after attempt of group 1; exits 0 when each trial's attempt died by SIGKILL at
    its point and the last attempt trained to the end."""
    out_dir, points = Path(out), plan.split(",")
    # What every attempt would import again (DDP's construction imports dynamo: seconds): once, here.
    import torch._dynamo  # noqa: F401
    import torchft  # noqa: F401

    for attempt in range(len(points) + 1):
        point = points[attempt] if attempt < len(points) else None
        pid = os.fork()
        if pid == 0:
            _attempt(out_dir, lighthouse, attempt, point)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        print(f"attempt {attempt} ({point}) ended with {code}", flush=True)
        if point is None:
            sys.exit(code)
        if code != -signal.SIGKILL or not (out_dir / f"killing_{attempt}").exists():
            sys.exit(f"attempt {attempt} was to die by SIGKILL at {point}, but ended with {code}")
        (out_dir / f"dead_{attempt}").write_text(str(code))
        _wait_for(out_dir / f"alone_{attempt}")


if __name__ == "__main__":
    {"survivor": survivor, "doomed": doomed}[sys.argv[1]](*sys.argv[2:])
