"""Trainer(plugins=[AsyncCheckpointIO()]) in fit: each background save holds what a synchronous
save of the same step holds although training went on while it was written, a resume from one
ends bit-identical to a run never stopped, and what ends a fit (its end, SIGTERM, an exception)
waits for the save in flight."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import trainmesh as tm
import trainmesh.checkpoint.writers as writers
from helpers.models import DropoutNet, random_classification
from trainmesh.callbacks import ModelCheckpoint
from trainmesh.checkpoint import AsyncCheckpointIO, load_checkpoint_file
from trainmesh.supervision import Preempted

MAX_STEPS = 9


class Progress(tm.Callback):
    """The step the training has reached, for the gate below (read from the writer's thread)."""

    def __init__(self) -> None:
        self.step, self.ended = 0, threading.Event()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.step = trainer.global_step

    def on_train_end(self, trainer, module):
        self.ended.set()


def hold_writes_until_training_moves_on(monkeypatch: pytest.MonkeyPatch, progress: Progress, seen: list[bool]) -> None:
    """Each background write starts only once training has taken a step after the save (or
    ended), and records whether the live weights then differ from the staged ones."""
    real = writers.atomic_save

    def gated(checkpoint: dict[str, Any], path: Any) -> Path:
        deadline = time.monotonic() + 60  # a hang guard, not a timing assertion
        while progress.step <= checkpoint["global_step"] and not progress.ended.is_set():
            assert time.monotonic() < deadline, "training did not move on while a save was in flight"
            time.sleep(0.001)
        live = progress.module.net[0].weight
        seen.append(not torch.equal(live, checkpoint["state_dict"]["net.0.weight"]))
        return real(checkpoint, path)

    monkeypatch.setattr(writers, "atomic_save", gated)


def fit(root: Path, *, plugins: list[Any], ckpt_path: str | None = None, callbacks=()) -> DropoutNet:
    tm.seed_everything(0)
    model = DropoutNet()
    trainer = tm.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=MAX_STEPS,
        default_root_dir=root,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=plugins,
        callbacks=[ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=3, save_top_k=-1), *callbacks],
        exact_resume=True,  # the resumed fit == the run that never stopped
    )
    trainer.fit(model, DataLoader(random_classification(), batch_size=8, shuffle=True), ckpt_path=ckpt_path)
    return model


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def test_async_checkpoints_hold_what_sync_ones_hold_and_resume_bit_identically(tmp_path, monkeypatch):
    run = tmp_path / "run"  # both runs write here (the callbacks' state holds the paths), then move
    reference = fit(run, plugins=[])
    shutil.move(run, tmp_path / "sync")
    progress, seen = Progress(), []
    hold_writes_until_training_moves_on(monkeypatch, progress, seen)
    progress.module = DropoutNet()  # replaced below by the model in training

    class Attach(tm.Callback):
        def on_train_start(self, trainer, module):
            progress.module = module

    background = fit(run, plugins=[AsyncCheckpointIO()], callbacks=[progress, Attach()])
    shutil.move(run, tmp_path / "async")
    assert seen[:2] == [True, True], seen  # the steps after each save changed the live weights meanwhile
    names = sorted(os.listdir(tmp_path / "sync" / "ckpt"))
    assert names == ["epoch=0-step=3.ckpt", "epoch=0-step=6.ckpt", "epoch=0-step=9.ckpt"]
    assert sorted(os.listdir(tmp_path / "async" / "ckpt")) == names
    for name in names:
        synchronous, background_save = (
            load_checkpoint_file(tmp_path / kind / "ckpt" / name) for kind in ("sync", "async")
        )
        for key in ("Progress", Attach.__qualname__):  # the async run's own test callbacks
            background_save["callbacks"].pop(key, None)  # gone where its state is empty
        for saved in (synchronous, background_save):  # which run wrote it: here, another fit of this process
            saved.pop("trainmesh_run")
        assert same(synchronous, background_save), name
    assert same(background.state_dict(), reference.state_dict())

    monkeypatch.undo()  # the resumed run's writes are not held
    shutil.copytree(tmp_path / "async", run)
    for later in names[1:]:  # the resumed run writes these again
        (run / "ckpt" / later).unlink()
    resumed = fit(run, plugins=[AsyncCheckpointIO()], ckpt_path=str(run / "ckpt" / "epoch=0-step=3.ckpt"))
    assert same(resumed.state_dict(), reference.state_dict())


def _real_atomic_save() -> Any:
    from trainmesh.checkpoint.io import atomic_save

    return atomic_save


class StopAt(tm.Callback):
    """SIGTERM to this process after step ``at``, as SLURM or Kubernetes would send it."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def slow_writes(monkeypatch: pytest.MonkeyPatch, *, fail_at: int | None = None) -> None:
    """Background writes that take a while: a fit that did not wait for them would end first."""
    real = _real_atomic_save()

    def slow(checkpoint: dict[str, Any], path: Any) -> Path:
        time.sleep(0.3)
        if checkpoint.get("global_step") == fail_at:
            raise OSError(28, "No space left on device (injected)")
        return real(checkpoint, path)

    monkeypatch.setattr(writers, "atomic_save", slow)


def test_sigterm_waits_for_the_save_in_flight_then_saves_and_waits_for_its_own(tmp_path, monkeypatch):
    slow_writes(monkeypatch)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    with pytest.raises(Preempted) as stopped:
        fit(tmp_path, plugins=[AsyncCheckpointIO()], callbacks=[StopAt(3)])  # a save at step 3 is in flight
    assert stopped.value.step == 3 and stopped.value.code == 75
    assert load_checkpoint_file(tmp_path / "ckpt" / "epoch=0-step=3.ckpt")["global_step"] == 3
    (preempted,) = tmp_path.glob("last-preempted-*.ckpt")  # the program's own name
    assert load_checkpoint_file(preempted)["global_step"] == 3
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers


def test_an_exception_in_fit_waits_for_the_save_in_flight_and_reports_its_failure(tmp_path, monkeypatch):
    slow_writes(monkeypatch, fail_at=6)

    class FailAt(tm.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if trainer.global_step == 6:  # the save of step 6 is in flight
                raise RuntimeError("the user's callback failed")

    with pytest.raises(RuntimeError, match="the user's callback failed") as raised:
        fit(tmp_path, plugins=[AsyncCheckpointIO()], callbacks=[FailAt()])
    assert load_checkpoint_file(tmp_path / "ckpt" / "epoch=0-step=3.ckpt")["global_step"] == 3
    if sys.version_info >= (3, 11):  # 3.10 prints the note instead
        notes = getattr(raised.value, "__notes__", [])
        assert any("checkpoint save in flight failed too: OSError" in note for note in notes), notes
    assert not (tmp_path / "ckpt" / "epoch=0-step=6.ckpt").exists()


def test_the_end_of_fit_raises_the_error_of_the_last_save(tmp_path, monkeypatch):
    slow_writes(monkeypatch, fail_at=MAX_STEPS)
    with pytest.raises(OSError, match="No space left"):
        fit(tmp_path, plugins=[AsyncCheckpointIO()])


@pytest.mark.parametrize(
    ("plugins", "error"),
    [
        (["deepspeed"], "no DeepSpeed, Horovod, TPU or IPU strategy"),
        ([AsyncCheckpointIO(), AsyncCheckpointIO()], "Received multiple values for CheckpointIO"),
        ([type("AsyncCheckpointIO", (), {})()], "another library's"),
    ],
)
def test_plugins_other_than_one_async_checkpoint_io_are_refused(plugins, error):
    with pytest.raises((TypeError, ValueError), match=error):
        tm.Trainer(plugins=plugins, logger=False)


def test_one_plugin_may_be_given_without_a_list():
    trainer = tm.Trainer(plugins=AsyncCheckpointIO(), logger=False, enable_progress_bar=False)
    assert isinstance(trainer.runtime.checkpoints.saves.background, AsyncCheckpointIO)
