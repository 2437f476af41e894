"""kill -9 at random moments while checkpoints are written, replaced and deleted (issue 12, items 7-9).

The parent (this test, torch and trainmesh already imported) forks children that save in a loop
and SIGKILLs them after a random delay; fault injection in the children also kills them right
after a rename, before an fsync, and halfway through deleting a directory: the moments when a
directory swap or the deletion of an older checkpoint is fragile. Every child resumes with
``ckpt_path="last"`` from where the killed one left off. After every kill the parent checks:

- every checkpoint visible under its name loads (a distributed one holds its own step's values);
- ``"last"`` is the newest complete last checkpoint: at least the newest step a child reported
  saved, at most one newer (a save that completed just before the kill, unreported);
- the next child resumed from exactly that checkpoint, and by the time it did, the temporaries
  the kill before it left were gone (cleaned at the start, before any save).

Every other child, and the final one of each loop, saves in the background (AsyncCheckpointIO,
issue 27 item 6): the same checks hold for its saves, and the resumes cross between the two kinds.
"""

from __future__ import annotations

import functools
import importlib
import os
import random
import select
import shutil
import signal
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import ModelCheckpoint
from trainmesh.checkpoint import AsyncCheckpointIO
from trainmesh.checkpoint.distributed import load_distributed, save_distributed
from trainmesh.checkpoint.formats import content_problem
from trainmesh.checkpoint.io import TEMPORARY_NAME, load_checkpoint_file, remove_checkpoint
from trainmesh.checkpoint.writers import SYNCHRONOUS
from trainmesh.trainer.checkpoint_paths import clear_interrupted_saves, resolve_ckpt_path
from trainmesh.trainer.last_checkpoint import fit_last_checkpoint

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="forks its savers"),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # DCP's single-process notice, foreign-file notices
]

KILLS = 24  # kills per loop; the final run of each loop is not killed
SEED = 20240611  # the delays and fault draws (the children's own timing still varies from run to run)
WIDTH = 4096  # the distributed checkpoint's tensor, sharded over 2 ranks


# ---- in the children ----------------------------------------------------------------------------
def inject_faults(rng: random.Random, probability: float) -> None:
    """Make this process SIGKILL itself, now and then, at the fragile moments of a save: after a
    directory's rename or halfway through a directory's deletion ``probability`` of the times,
    after a file's rename or before an fsync a fifth as often."""
    replace, rmtree, fsync = os.replace, shutil.rmtree, os.fsync

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def replace_then_die(src: Any, dst: Any) -> None:
        replace(src, dst)
        if rng.random() < (probability if os.path.isdir(dst) else probability / 5):
            die()  # just after a rename: between the two renames of a non-atomic swap

    def rmtree_halfway(path: Any, *args: Any, **kwargs: Any) -> None:
        if rng.random() < probability and os.path.isdir(path):
            for name in sorted(os.listdir(path))[: max(1, len(os.listdir(path)) // 2)]:
                os.unlink(os.path.join(path, name))
            die()  # halfway through deleting a directory
        rmtree(path, *args, **kwargs)

    def die_before_fsync(fd: int) -> None:
        if rng.random() < probability / 5:
            die()  # a file written but not yet renamed into place
        fsync(fd)

    os.replace, shutil.rmtree, os.fsync = replace_then_die, rmtree_halfway, die_before_fsync


PEER_GONE = 4  # a rank's exit status when its collective failed because the other rank was killed


def child_main(body: Callable[[], None]) -> None:
    """Run ``body`` in a forked child and leave without running the parent's exit handlers."""
    try:
        torch.set_num_threads(1)
        body()
        os._exit(0)
    except BaseException as exc:  # noqa: BLE001 - reported through the exit status and stderr
        text = "".join(traceback.format_exception(exc))
        if any(sign in text for sign in ("Connection reset", "Connection closed", "Broken pipe", "connectFullMesh")):
            os._exit(PEER_GONE)
        traceback.print_exc()
        os._exit(3)


def say(fd: int, what: str, step: int) -> None:
    os.write(fd, f"{what} {step}\n".encode())


class Scored(tm.Module):
    """Each step's score is its step, so every save enters the top 2 and an older one is deleted."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(64, 64)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log("score", float(self.global_step), on_step=True)
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Reporting(ModelCheckpoint):
    """Tells the parent where the run started and each step whose saves (top-k and last) are done."""

    def __init__(self, fd: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fd = fd

    def on_train_start(self, trainer: Any, module: Any) -> None:
        super().on_train_start(trainer, module)
        say(self.fd, "start", trainer.global_step)

    def _save(self, trainer: Any, *, mid_epoch: bool) -> None:
        super()._save(trainer, mid_epoch=mid_epoch)
        say(self.fd, "saved", trainer.global_step)


def fit_with_resume(folder: Path, fd: int, *, max_steps: int, background: bool = False) -> None:
    """A real Trainer.fit(ckpt_path="last") with ModelCheckpoint(save_top_k=2, save_last=True);
    ``background``: saves with AsyncCheckpointIO."""
    loader = DataLoader(TensorDataset(torch.randn(64, 64)), batch_size=8)
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=max_steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=folder,
        plugins=[AsyncCheckpointIO()] if background else None,
        exact_resume=True,  # trainmesh's own "last": the newest complete checkpoint (top-k files too)
        callbacks=[
            Reporting(
                fd, dirpath=folder, monitor="score", mode="max", save_top_k=2, every_n_train_steps=1, save_last=True
            )
        ],
    )
    trainer.fit(Scored(), loader, ckpt_path="last")


class Collectives:
    """The Runtime collectives ModelCheckpoint and the start-of-fit cleaning use."""

    device = torch.device("cpu")

    def all_reduce(self, value: torch.Tensor, op: str = "mean") -> torch.Tensor:
        # ModelCheckpoint's top-k decision, taken by every rank together (min: all must agree)
        ops = {"min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX, "sum": dist.ReduceOp.SUM}
        reduced = value.clone()
        dist.all_reduce(reduced, op=ops[op])
        return reduced

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def barrier(self, name: str | None = None) -> None:
        dist.barrier()


def distributed_saves(rank: int, folder: Path, store: Path, fd: int, *, max_steps: int, background: bool) -> None:
    """Two ranks save DTensor shards through ModelCheckpoint and save_distributed, as fsdp does,
    starting as the Trainer's fit does: clean, then resume from "last". ``background``: through
    AsyncCheckpointIO, as fsdp does with it, the live shards changed right after each save."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    callback = ModelCheckpoint(
        dirpath=folder, monitor="score", mode="max", save_top_k=2, every_n_train_steps=1, save_last=True
    )
    trainer = SimpleNamespace(
        runtime=Collectives(),
        is_global_zero=rank == 0,
        ckpt_path=None,
        callbacks=[callback],
        checkpoint_callback=callback,
        default_root_dir=str(folder),
        loggers=[],
        stage="fit",
        global_step=0,
        current_epoch=0,
        callback_metrics={},
        fast_dev_run=0,
        sanity_checking=False,
    )

    def sharded(step: int) -> dict[str, Any]:
        return {"w": distribute_tensor(torch.full((WIDTH,), float(step)), mesh, [Shard(0)])}

    live = sharded(0)  # the training's own tensor, changed in place
    writer = AsyncCheckpointIO() if background else SYNCHRONOUS
    if background:
        writer.open()

    def save_checkpoint(
        path: str, weights_only: bool | None = None
    ) -> None:  # ModelCheckpoint: (path, save_weights_only)
        live["w"].to_local().fill_(float(trainer.global_step))
        checkpoint = {
            "state_dict": live,
            "global_step": trainer.global_step,
            "callbacks": {callback.state_key: callback.state_dict()},
        }
        writer.write_distributed(checkpoint, path, rank=rank, sharded_keys=["state_dict"])
        live["w"].to_local().fill_(-1.0)  # the next steps: a background save wrote its own copy

    trainer.save_checkpoint = save_checkpoint
    trainer.remove_checkpoint = lambda path: writer.after_save(functools.partial(remove_checkpoint, path))
    clear_interrupted_saves(trainer, "last")
    source = resolve_ckpt_path(trainer, "last", allow_fresh_start=True)
    if source is not None:
        state = load_distributed(source, {"state_dict": sharded(0)})
        callback.load_state_dict(state["callbacks"][callback.state_key])
        trainer.ckpt_path, trainer.global_step = source, state["global_step"]
    callback.on_train_start(trainer, None)
    if rank == 0:
        say(fd, "start", trainer.global_step)
    while trainer.global_step < max_steps:
        trainer.global_step += 1
        trainer.callback_metrics = {"score": torch.tensor(float(trainer.global_step))}
        callback.on_train_batch_end(trainer, None, None, None, 0)
        if rank == 0:
            say(fd, "saved", trainer.global_step)
    if background:
        writer.close()  # as the end of fit: the save in flight is complete before the process ends
    dist.destroy_process_group()


# ---- in the parent ------------------------------------------------------------------------------
def temporaries(folder: Path) -> set[str]:
    return {name for name in os.listdir(folder) if TEMPORARY_NAME.match(name)}


def visible(folder: Path) -> list[Path]:
    return sorted(path for path in folder.iterdir() if not path.name.startswith("."))


class Round:
    """One run of the children: started, maybe killed, its messages read."""

    def __init__(self, bodies: list[Callable[[int], None]]) -> None:
        read, write = os.pipe()
        self.pids = []
        for body in bodies:
            pid = os.fork()
            if pid == 0:
                os.close(read)
                child_main(lambda body=body: body(write))
            self.pids.append(pid)
        os.close(write)
        self.read, self.text, self.statuses = read, "", {}

    def wait_for_start(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while "start" not in self.text and time.monotonic() < deadline and not self.any_exited():
            if select.select([self.read], [], [], 0.01)[0]:
                self.text += os.read(self.read, 65536).decode()

    def any_exited(self) -> bool:
        for pid in self.pids:
            if pid not in self.statuses:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    self.statuses[pid] = status
        return bool(self.statuses)

    def kill(self, rng: random.Random) -> None:
        for pid in rng.sample(self.pids, len(self.pids)):
            if pid not in self.statuses:
                os.kill(pid, signal.SIGKILL)
        self.finish(timeout=30)

    def finish(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.statuses) < len(self.pids):
            if time.monotonic() > deadline:  # hung: never leave a child behind the test
                for pid in set(self.pids) - set(self.statuses):
                    os.kill(pid, signal.SIGKILL)
                    self.statuses[pid] = os.waitpid(pid, 0)[1]
                raise AssertionError(f"children still running after {timeout} s: {self.text[-300:]}")
            if not self.any_exited():
                time.sleep(0.005)
        while chunk := os.read(self.read, 65536):
            self.text += chunk.decode()
        os.close(self.read)

    def values(self, what: str) -> list[int]:
        return [int(line.split()[1]) for line in self.text.splitlines() if line.startswith(f"{what} ")]

    def self_killed_or_killed(self) -> None:
        killed = [os.WIFSIGNALED(s) and os.WTERMSIG(s) == signal.SIGKILL for s in self.statuses.values()]
        for status, was_killed in zip(self.statuses.values(), killed):
            peer_gone = os.WIFEXITED(status) and os.WEXITSTATUS(status) == PEER_GONE and any(killed)
            assert was_killed or peer_gone, (
                f"a child failed by itself (status {status}); its traceback is in the captured stderr"
            )


def kill_loop(
    folder: Path,
    start: Callable[[bool, int], Round],
    newest_step: Callable[[], int],
    check_visible: Callable[[Path], None],
    *,
    rng: random.Random,
    latest: float,
) -> dict[str, int]:
    """``KILLS`` rounds of start, random kill, check; then one run that ends by itself."""
    counts = {"parent kills": 0, "fault kills": 0, "temporaries left": 0, "cleaned at start": 0}
    saved, expected_start = 0, 0
    for _ in range(KILLS):
        before = temporaries(folder)
        run = start(True, 10**6)
        if rng.random() < 0.2:
            time.sleep(rng.uniform(0, 0.05))  # early: while it cleans, searches, loads
        else:
            run.wait_for_start(timeout=60)
            time.sleep(rng.uniform(0, latest))
        killed_by_fault = run.any_exited()
        run.kill(rng)
        run.self_killed_or_killed()
        counts["fault kills" if killed_by_fault else "parent kills"] += 1
        if run.values("start"):
            assert run.values("start") == [expected_start], "did not resume from the newest complete checkpoint"
            assert not before & temporaries(folder), f"left over after the start: {before & temporaries(folder)}"
            counts["cleaned at start"] += bool(before)
        # A run's start is a complete save too: the one the kill before it left unreported.
        saved = max([saved, *run.values("start"), *run.values("saved")])
        for path in visible(folder):
            check_visible(path)
        expected_start = newest_step()
        assert saved <= expected_start <= saved + 1, (
            f"'last' is at step {expected_start}, saves reached {saved}: {sorted(os.listdir(folder))} {run.text[-200:]!r}"
        )
        counts["temporaries left"] += bool(temporaries(folder))
    final = start(False, expected_start + 3)
    final.finish(timeout=120)
    assert all(os.WIFEXITED(s) and os.WEXITSTATUS(s) == 0 for s in final.statuses.values()), final.statuses
    assert final.values("start") == [expected_start] and max(final.values("saved")) == expected_start + 3
    assert not temporaries(folder), "the final run's start left stale temporaries behind"
    assert newest_step() == expected_start + 3
    for path in visible(folder):  # what the final run (saving in the background) left, complete
        check_visible(path)
    return counts


def fake_trainer(folder: Path) -> SimpleNamespace:
    return SimpleNamespace(
        checkpoint_callback=None, default_root_dir=str(folder), loggers=[], stage="fit", is_global_zero=True
    )


def warm_up() -> None:
    """Import in the parent what a child would otherwise import after each fork (seconds each:
    torch._dynamo is imported by the first optimizer and the first DTensor)."""
    for name in ("torch._dynamo", "torch.distributed.checkpoint", "torch.distributed.tensor"):
        importlib.import_module(name)


def test_kill_9_during_single_file_saves_and_deletions(tmp_path: Path) -> None:
    warm_up()
    folder = tmp_path / "ckpt"
    folder.mkdir()
    rng = random.Random(SEED)
    with open(os.devnull, "wb") as sink:  # one short fit here: its lazy imports then happen once, not per child
        fit_with_resume(tmp_path / "warm", sink.fileno(), max_steps=1)

    rounds = iter(range(10**6))

    def start(faults: bool, max_steps: int) -> Round:
        seed = rng.randrange(2**32)
        faulty = faults and rng.random() < 2 / 3
        background = next(rounds) % 2 == 1 or not faults  # every other round, and the final one: AsyncCheckpointIO

        def body(fd: int) -> None:
            if faulty:
                inject_faults(random.Random(seed), 0.05)
            fit_with_resume(folder, fd, max_steps=max_steps, background=background)

        return Round([body])

    def newest_step() -> int:
        path = resolve_ckpt_path(fake_trainer(folder), "last", allow_fresh_start=True)
        return 0 if path is None else load_checkpoint_file(path)["global_step"]

    def check_visible(path: Path) -> None:
        assert content_problem(load_checkpoint_file(path), str(path)) is None

    counts = kill_loop(folder, start, newest_step, check_visible, rng=rng, latest=0.15)
    print(f"single-file saves: {counts}")
    assert counts["cleaned at start"] > 0, "no kill left a temporary for a start to clean: the loop proved little"


def test_kill_9_during_distributed_saves_swaps_and_deletions(tmp_path: Path) -> None:
    warm_up()
    folder = tmp_path / "ckpt"
    folder.mkdir()
    rng = random.Random(SEED + 1)
    rounds = iter(range(10**6))

    def start(faults: bool, max_steps: int) -> Round:
        number = next(rounds)
        store, seed = tmp_path / f"store-{number}", rng.randrange(2**32)
        faulty = faults and rng.random() < 2 / 3  # the other rounds end by the parent's kill only
        background = number % 2 == 1 or not faults  # every other round, and the final one: AsyncCheckpointIO

        def rank(r: int) -> Callable[[int], None]:
            def body(fd: int) -> None:
                if faulty and r == 0:  # rank 0 renames and deletes
                    inject_faults(random.Random(seed), 0.12)
                distributed_saves(r, folder, store, fd, max_steps=max_steps, background=background)

            return body

        return Round([rank(0), rank(1)])

    def newest_step() -> int:
        path = resolve_ckpt_path(fake_trainer(folder), "last", allow_fresh_start=True)
        return 0 if path is None else load_distributed(path, {"state_dict": {"w": torch.empty(WIDTH)}})["global_step"]

    def check_visible(path: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = load_distributed(path, {"state_dict": {"w": torch.empty(WIDTH)}})
        assert torch.equal(loaded["state_dict"]["w"], torch.full((WIDTH,), float(loaded["global_step"]))), path

    counts = kill_loop(folder, start, newest_step, check_visible, rng=rng, latest=0.3)
    print(f"distributed saves: {counts}")
    assert counts["cleaned at start"] > 0, "no kill left a temporary for a start to clean: the loop proved little"


@pytest.mark.parametrize("exchange", [True, False], ids=["atomic exchange", "two renames (NFS, Lustre)"])
def test_a_kill_after_each_rename_of_a_directory_swap_resumes_from_the_newest(tmp_path: Path, exchange: bool) -> None:
    """The renames of a save, one at a time: a child replacing step 1's last.ckpt by step 2's is
    killed right after its k-th rename. The first is the state file's, inside the staging
    directory: last.ckpt is still step 1's. The second is the swap (with an atomic exchange: the
    old one's way out, after it); without an exchange it is the old one's way out, before the new
    one's way in, so that no last.ckpt exists: the next start finishes that swap. Either way the
    next start resumes from step 2 from then on, and leaves no temporary behind."""
    import trainmesh.checkpoint.distributed as distributed

    def save(step: int) -> None:
        save_distributed(
            {"state_dict": {"w": torch.full((4,), float(step))}, "global_step": step},
            folder / "last.ckpt",
            rank=0,
            sharded_keys=["state_dict"],
        )

    for kill_after in (1, 2, 3):
        folder = tmp_path / f"after-{kill_after}"
        folder.mkdir()
        save(1)
        pid = os.fork()
        if pid == 0:

            def body() -> None:
                if not exchange:
                    distributed.exchange_paths = lambda first, second: False
                replace, renames = os.replace, []

                def replace_then_die(src: Any, dst: Any) -> None:
                    replace(src, dst)
                    renames.append(dst)
                    if len(renames) == kill_after:  # noqa: B023 the forked child runs body in this iteration
                        os.kill(os.getpid(), signal.SIGKILL)

                os.replace = replace_then_die
                save(2)

            child_main(body)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 0, "the child failed: see its traceback"
        trainer = fake_trainer(folder)
        trainer.callbacks = trainer.checkpoint_callbacks = [ModelCheckpoint(dirpath=folder)]
        trainer.runtime = SimpleNamespace(barrier=lambda name=None: None)
        # fit(ckpt_path="last")'s order (trainer.py): Lightning's choice of the file before the set-up, which
        # finishes a swap cut in two itself, then the start-up cleanup of what the killed save left
        path = fit_last_checkpoint(trainer)
        clear_interrupted_saves(trainer, path)
        assert path == str(folder / "last.ckpt"), (kill_after, os.listdir(folder))
        step = load_distributed(path, {"state_dict": {"w": torch.empty(4)}})["global_step"]
        assert step == (1 if kill_after == 1 else 2), (kill_after, exchange, status)
        assert not temporaries(folder), (kill_after, os.listdir(folder))
