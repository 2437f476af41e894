"""An automatic resume (an elastic restart, a SLURM requeue, the run after a preemption) takes only its own
run's checkpoints (trainer/run_identity.py): programs that share one default_root_dir leave each other's alone."""

import os
import shutil
import signal

import pytest
import torch

import trainmesh as tm
from helpers.models import DropoutNet, flat_weights, loaders, quiet_trainer
from helpers.restarts import as_restart_of
from helpers.said import said
from trainmesh.supervision import PREEMPTION_CHECKPOINT, Preempted


class OtherNet(DropoutNet):
    """Another model of the same shapes: another script's, trained later in the same folder."""


class FirstStep(tm.Callback):
    def __init__(self) -> None:
        self.step: int | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.step = trainer.global_step


def _fit(root, epochs, model_class=DropoutNet, *, logger=False, ckpt_path=None, **hparams):
    tm.seed_everything(0)
    first, model = FirstStep(), model_class(**hparams)
    trainer = quiet_trainer(
        max_epochs=epochs, default_root_dir=root, enable_checkpointing=True, logger=logger, callbacks=[first]
    )
    trainer.fit(model, loaders()[0], ckpt_path=ckpt_path)
    return model, first.step, trainer


def test_a_restart_resumes_its_own_checkpoint_not_another_program_s_newer_one(tmp_path, monkeypatch, caplog):
    # Before: program A's elastic restart resumed program B's newer epoch=2-step=36.ckpt (same shapes), trained
    # nothing and ended with B's weights; with other shapes the load failed. Now: A's own epoch=0-step=12.ckpt.
    _fit(tmp_path, 1)
    _fit(tmp_path, 3, OtherNet)
    own, other = (tmp_path / "checkpoints" / name for name in ("epoch=0-step=12.ckpt", "epoch=2-step=36.ckpt"))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    as_restart_of(monkeypatch, own)
    resumed, first, _ = _fit(tmp_path, 2)
    out = said(caplog)
    assert first == 12, out
    assert f"left alone 1 checkpoint(s) of other runs: {other}: written by another program" in out
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT")
    never_stopped, _, _ = _fit(tmp_path / "never_stopped", 2)
    assert torch.equal(flat_weights(resumed), flat_weights(never_stopped))
    # a checkpoint the program names is never filtered
    _, first, _ = _fit(tmp_path / "named", 4, ckpt_path=other)
    assert first == 36


def test_a_requeued_sweep_resumes_each_fit_from_its_own_version_folder(tmp_path, monkeypatch, caplog):
    # Two runs of one script in one SLURM job, one after the other (same class, other hparams), each in its own
    # version folder. Before: after the requeue the first resumed the second's newer checkpoint (lr 0.01's weights).
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setattr("trainmesh.trainer.run_identity._fits", 0)
    _fit(tmp_path, 1, logger=tm.loggers.CSVLogger(tmp_path), lr=0.05)
    _fit(tmp_path, 1, logger=tm.loggers.CSVLogger(tmp_path), lr=0.01)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    as_restart_of(monkeypatch, tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "epoch=0-step=12.ckpt")
    first_run, first, _ = _fit(tmp_path, 2, logger=tm.loggers.CSVLogger(tmp_path), lr=0.05)
    assert first == 12, said(caplog)
    assert f"resuming from {tmp_path / 'lightning_logs' / 'version_0' / 'checkpoints'}" in said(caplog)
    for name in ("SLURM_RESTART_COUNT", "SLURM_JOB_ID"):
        monkeypatch.delenv(name)
    never_stopped, _, _ = _fit(tmp_path / "never_stopped", 2, lr=0.05)
    assert torch.equal(flat_weights(first_run), flat_weights(never_stopped))


@pytest.mark.parametrize("written_by", ["another program", "older trainmesh"])
def test_a_preemption_checkpoint_another_program_left_does_not_make_a_fresh_program_resume(
    tmp_path, caplog, written_by
):
    # Before: program B, started afresh where program A's preemption left last-preempted.ckpt, resumed it (A's
    # weights and step 12) and removed it at its end, so A's next run started over.
    _fit(tmp_path / "a", 1)
    marker = tmp_path / PREEMPTION_CHECKPOINT
    shutil.copy(tmp_path / "a" / "checkpoints" / "epoch=0-step=12.ckpt", marker)
    if written_by == "older trainmesh":  # a checkpoint without the record of its run
        saved = torch.load(marker, weights_only=False)
        del saved["trainmesh_run"]
        torch.save(saved, marker)
    model_class = OtherNet if written_by == "another program" else DropoutNet
    _, first, _ = _fit(tmp_path, 1, model_class)
    assert first == 0, said(caplog)
    assert f"{marker} is not this program's preemption checkpoint" in said(caplog)
    assert os.path.exists(marker)  # left for the program it belongs to


class StopAt(tm.Callback):
    """SIGTERM to this process after step ``at``, as SLURM or Kubernetes would send it."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def _steps(root, model_class, stop_at=None):
    tm.seed_everything(0)
    first, model = FirstStep(), model_class()
    callbacks = [first] if stop_at is None else [first, StopAt(stop_at)]
    trainer = quiet_trainer(max_steps=10, default_root_dir=root, exact_resume=True, callbacks=callbacks)
    trainer.fit(model, loaders()[0])
    return model, first.step


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_two_programs_preempted_in_one_folder_each_resume_their_own_state(tmp_path, monkeypatch, caplog):
    # Before: both saved <folder>/last-preempted.ckpt, B's overwrote A's, and A's next run, finding B's,
    # started over (A's 3 steps lost). Now each program's file is named by its hash: both resume.
    saved = {}
    for model_class, at in ((DropoutNet, 3), (OtherNet, 5)):
        with pytest.raises(Preempted):
            _steps(tmp_path, model_class, stop_at=at)
        saved[model_class] = max(tmp_path.glob("last-preempted*.ckpt"), key=os.path.getmtime)  # the one just saved
    assert saved[DropoutNet] != saved[OtherNet] and saved[DropoutNet].exists(), "B's state overwrote A's"
    for model_class, at in ((DropoutNet, 3), (OtherNet, 5)):
        with monkeypatch.context() as patched:
            as_restart_of(patched, saved[model_class])
            resumed, first = _steps(tmp_path, model_class)
        assert first == at, said(caplog)
        assert f"the previous run was preempted: resuming from {saved[model_class]}" in said(caplog)
        assert not saved[model_class].exists()  # retired by its own program's finished fit
        never_stopped, _ = _steps(tmp_path / f"never_stopped_{at}", model_class)
        assert torch.equal(flat_weights(resumed), flat_weights(never_stopped))


def test_a_preemption_checkpoint_of_the_previous_release_is_still_resumed_by_its_program(tmp_path, monkeypatch, caplog):
    # last-preempted.ckpt, the one name every program shared before: its own program resumes it and retires it.
    with pytest.raises(Preempted):
        _steps(tmp_path, DropoutNet, stop_at=4)
    (new,) = tmp_path.glob("last-preempted-*.ckpt")
    old = new.rename(tmp_path / PREEMPTION_CHECKPOINT)
    as_restart_of(monkeypatch, old)
    resumed, first = _steps(tmp_path, DropoutNet)
    assert first == 4, said(caplog)
    assert not old.exists()
    never_stopped, _ = _steps(tmp_path / "never_stopped", DropoutNet)
    assert torch.equal(flat_weights(resumed), flat_weights(never_stopped))


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_a_preempted_program_rerun_with_fit_last_resumes_its_own_preemption_state(tmp_path, monkeypatch, caplog):
    # fit(ckpt_path="last") picks its file before the set-up (resume.select_named_last), before the module is
    # attached and the fit counted: it must still know its own preemption file (a restart: its own run's
    # checkpoints only), not take the newest "last" of the folder, another program's preempted state.
    for model_class, at in ((DropoutNet, 3), (OtherNet, 5)):
        with pytest.raises(Preempted):
            _steps(tmp_path, model_class, stop_at=at)
    own = min(tmp_path.glob("last-preempted-*.ckpt"), key=os.path.getmtime)
    as_restart_of(monkeypatch, own)
    tm.seed_everything(0)
    first, model = FirstStep(), DropoutNet()
    trainer = quiet_trainer(max_steps=10, default_root_dir=tmp_path, callbacks=[first])
    trainer.fit(model, loaders()[0], ckpt_path="last")
    assert first.step == 3, said(caplog)
    assert f"resuming from {own}" in said(caplog)


def test_fit_last_beside_another_programs_preemption_checkpoint_resumes_lightnings_last(tmp_path, caplog):
    """``fit(ckpt_path="last")`` where the folder holds another program's preemption checkpoint (the previous
    release's shared name): ``select_named_last`` sees a reason to restart and leaves "last" to the run's search
    after the set-up, which finds the marker another program's (no restart of this one) and takes Lightning's
    "last": the newest last file of this fit's checkpoint folders (resume.read_fit_checkpoint)."""
    from trainmesh.callbacks import ModelCheckpoint

    def fit(epochs, ckpt_path=None):
        tm.seed_everything(0)
        first, saves = FirstStep(), ModelCheckpoint(dirpath=tmp_path / "saves", save_last=True, save_top_k=0)
        trainer = quiet_trainer(
            max_epochs=epochs, default_root_dir=tmp_path, enable_checkpointing=True, callbacks=[first, saves]
        )
        trainer.fit(DropoutNet(), loaders()[0], ckpt_path=ckpt_path)
        return first.step

    fit(1)
    _fit(tmp_path / "other", 1, OtherNet)
    marker = tmp_path / PREEMPTION_CHECKPOINT
    shutil.copy(tmp_path / "other" / "checkpoints" / "epoch=0-step=12.ckpt", marker)
    os.utime(marker)  # newer than this program's last.ckpt
    said(caplog)
    first = fit(2, ckpt_path="last")
    out = said(caplog)
    assert first == 12, out
    assert f"{marker} is not this program's preemption checkpoint" in out
    assert f"Restoring states from the checkpoint path at {tmp_path / 'saves' / 'last.ckpt'}" in out
    assert os.path.exists(marker)  # left for the program it belongs to
