"""ckpt_path="last" under Trainer(exact_resume=True) and the automatic resume after a restart: the newest complete checkpoint of
the run by the training position it records, whatever its name, named in one line (issue 27, item 4)."""

import os
import shutil

import pytest

import trainmesh as tm
from helpers.models import DropoutNet, loaders, quiet_trainer
from helpers.restarts import as_restart_of
from helpers.said import said
from trainmesh.callbacks import ModelCheckpoint
from trainmesh.trainer import own_saves


class FirstStep(tm.Callback):
    """The global step fit starts training at (after any resume)."""

    def __init__(self) -> None:
        self.step: int | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.step = trainer.global_step


def _fit(folder, epochs, *, save_last, ckpt_path=None, exact=True):
    first = FirstStep()
    trainer = quiet_trainer(
        max_epochs=epochs,
        default_root_dir=folder,
        enable_checkpointing=True,
        callbacks=[ModelCheckpoint(dirpath=folder / "ckpts", save_top_k=-1, save_last=save_last), first],
        exact_resume=exact,  # trainmesh's own "last" (a named "last" without it is Lightning's: last*.ckpt only)
    )
    train, val = loaders()
    trainer.fit(DropoutNet(), train, val, ckpt_path=ckpt_path)
    return trainer, first.step


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory):
    """A run of 2 epochs (12 steps each) that kept every epoch's checkpoint and last.ckpt."""
    folder = tmp_path_factory.mktemp("run")
    _fit(folder, 2, save_last=True)
    assert sorted(os.listdir(folder / "ckpts")) == ["epoch=0-step=12.ckpt", "epoch=1-step=24.ckpt", "last.ckpt"]
    return folder


def _copy(run, tmp_path, *, keep):
    """The run's checkpoint folder, with only the files ``keep`` names (source name -> new name)."""
    (tmp_path / "ckpts").mkdir()
    for source, name in keep.items():
        shutil.copy2(run / "ckpts" / source, tmp_path / "ckpts" / name)
    return tmp_path


def test_last_resumes_from_a_top_k_file_when_no_last_ckpt_exists(two_epochs, tmp_path, caplog):
    # A kill during the first last.ckpt write leaves only the top-k file: today's code started over.
    folder = _copy(two_epochs, tmp_path, keep={"epoch=0-step=12.ckpt": "epoch=0-step=12.ckpt"})
    trainer, first = _fit(folder, 2, save_last=True, ckpt_path="last")
    assert first == 12 and trainer.global_step == 24
    out = said(caplog)
    chosen = folder / "ckpts" / "epoch=0-step=12.ckpt"
    assert f"ckpt_path='last': resuming from {chosen} (epoch 0, global step 12)" in out
    assert out.count("resuming from") == 1, "one line"


def test_last_prefers_a_newer_top_k_file_over_an_older_last_ckpt(two_epochs, tmp_path, caplog):
    # last.ckpt holds epoch 0 (a kill during its epoch-1 rewrite) and is the newest file by mtime:
    # the position recorded inside decides, not the name or the time.
    folder = _copy(
        two_epochs, tmp_path, keep={"epoch=1-step=24.ckpt": "epoch=1-step=24.ckpt", "epoch=0-step=12.ckpt": "last.ckpt"}
    )
    os.utime(folder / "ckpts" / "epoch=1-step=24.ckpt", (1_000_000, 1_000_000))
    trainer, first = _fit(folder, 3, save_last=True, ckpt_path="last")
    assert first == 24 and trainer.global_step == 36
    assert f"resuming from {folder / 'ckpts' / 'epoch=1-step=24.ckpt'} (epoch 1, global step 24)" in (said(caplog))


@pytest.mark.parametrize("named_last", [False, True])
def test_restart_resumes_from_the_newest_complete_file_and_says_so(
    two_epochs, tmp_path, caplog, monkeypatch, named_last
):
    # The automatic resume (fit without ckpt_path) of an elastic restart: the same choice, with a
    # damaged newer file skipped with a warning that names it. A program that names "last" (without
    # exact_resume) gets the same after a restart, not Lightning's rule (no last.ckpt here: a fresh start).
    folder = _copy(two_epochs, tmp_path, keep={"epoch=0-step=12.ckpt": "epoch=0-step=12.ckpt"})
    (folder / "ckpts" / "epoch=1-step=24.ckpt").write_bytes(b"torn")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    as_restart_of(monkeypatch, folder / "ckpts" / "epoch=0-step=12.ckpt")
    with pytest.warns(UserWarning, match=r"skipped .*epoch=1-step=24\.ckpt"):
        trainer, first = _fit(folder, 2, save_last=True, ckpt_path="last" if named_last else None, exact=not named_last)
    assert first == 12 and trainer.global_step == 24
    announced = "ckpt_path='last'" if named_last else "trainmesh: restart 1 of the elastic agent"
    assert (
        f"{announced}: resuming from {folder / 'ckpts' / 'epoch=0-step=12.ckpt'} (epoch 0, global step 12)"
    ) in said(caplog)


def test_resuming_a_run_that_reached_max_epochs_says_there_is_nothing_to_train(two_epochs, tmp_path, caplog):
    folder = _copy(two_epochs, tmp_path, keep={"epoch=1-step=24.ckpt": "last.ckpt"})
    trainer, _ = _fit(folder, 2, save_last=True, ckpt_path="last")
    assert trainer.global_step == 24
    assert (
        f"trainmesh: {folder / 'ckpts' / 'last.ckpt'} is at epoch 1, global step 24: max_epochs=2 is already "
        "reached, so there is nothing to train. Raise max_epochs to train further"
    ) in said(caplog)


def test_restart_resumes_from_the_default_callbacks_file(tmp_path, caplog, monkeypatch):
    # The Trainer's default checkpointing is Lightning's ModelCheckpoint(): epoch=E-step=S.ckpt, no
    # last.ckpt. An elastic restart's automatic resume finds that file.
    def fit(epochs):
        first = FirstStep()
        trainer = quiet_trainer(
            max_epochs=epochs, default_root_dir=tmp_path, enable_checkpointing=True, callbacks=[first]
        )
        trainer.fit(DropoutNet(), *loaders())
        return trainer, first.step

    fit(1)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["epoch=0-step=12.ckpt"]
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    as_restart_of(monkeypatch, tmp_path / "checkpoints" / "epoch=0-step=12.ckpt")  # a new process
    trainer, first = fit(2)
    assert first == 12 and trainer.global_step == 24
    chosen = tmp_path / "checkpoints" / "epoch=0-step=12.ckpt"
    assert f"trainmesh: restart 1 of the elastic agent: resuming from {chosen} (epoch 0, global step 12)" in said(
        caplog
    )
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["epoch=0-step=12.ckpt", "epoch=1-step=24.ckpt"]


@pytest.mark.parametrize("ckpt_path", [None, "last"])
def test_a_restarted_process_s_next_fit_does_not_resume_its_own_earlier_fit(tmp_path, caplog, monkeypatch, ckpt_path):
    # A restarted script that trains models one after another (a sweep): the automatic resume takes what
    # the failed attempt left, never a checkpoint this process's earlier fit wrote. Before, the second
    # model resumed the first one's final epoch=1-step=24.ckpt, trained nothing and ended with its weights;
    # Lightning (no automatic resume; its "last": this fit's new version folder, empty) starts it at step 0.
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    monkeypatch.setattr(own_saves, "_WRITTEN", set())
    starts = []
    for _ in range(2):
        first = FirstStep()
        trainer = quiet_trainer(max_epochs=2, default_root_dir=tmp_path, enable_checkpointing=True, callbacks=[first])
        trainer.fit(DropoutNet(), *loaders(), ckpt_path=ckpt_path)
        starts.append((first.step, trainer.global_step))
    assert starts == [(0, 24), (0, 24)]
