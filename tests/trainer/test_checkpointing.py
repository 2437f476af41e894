"""Checkpoints written by the Trainer: cadence, atomicity, Ctrl-C, resume from 'last'."""

import csv
import warnings

import pytest
import torch

import trainmesh as tm
from helpers.models import DropoutNet, flat_weights, loaders, quiet_trainer
from helpers.said import said
from trainmesh.callbacks import EarlyStopping, ModelCheckpoint
from trainmesh.checkpoint import io as checkpoint_io
from trainmesh.checkpoint.io import atomic_save, load_checkpoint_file
from trainmesh.loggers import CSVLogger


def test_model_checkpoint_keeps_top_k_and_last_and_resume_from_last(tmp_path):
    torch.manual_seed(0)  # which epochs make the top 2 depends on the draws: not on the tests run before
    train, val = loaders()
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpts", monitor="val_loss", save_top_k=2, save_last=True)
    trainer = quiet_trainer(max_epochs=4, callbacks=[checkpoint], enable_checkpointing=True)
    trainer.fit(DropoutNet(), train, val)
    kept = sorted(p.name for p in (tmp_path / "ckpts").glob("*.ckpt"))
    assert len(kept) == 3 and "last.ckpt" in kept
    assert checkpoint.best_model_score == min(checkpoint.best_k_models.values())
    saved = load_checkpoint_file(checkpoint.last_model_path)
    # As Lightning 2.6: last.ckpt is written beside a top-k save, so it holds the newest one's step
    # (test_model_checkpoint_last_lightning26.py compares the rule with Lightning itself).
    newest_top_k = max(load_checkpoint_file(path)["global_step"] for path in checkpoint.best_k_models)
    assert saved["global_step"] == newest_top_k and saved["loop"]["epoch_finished"]
    assert saved["hyper_parameters"]["lr"] == 0.05

    resumed = DropoutNet()
    trainer2 = quiet_trainer(
        max_epochs=5, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last=True)], enable_checkpointing=True
    )
    trainer2.fit(resumed, train, val, ckpt_path=checkpoint.last_model_path)
    assert trainer2.global_step == 60 and trainer2.current_epoch == 5


def test_load_from_checkpoint_rebuilds_the_module(tmp_path):
    train, _ = loaders()
    model = DropoutNet(lr=0.01)
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(model, train)
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    loaded = DropoutNet.load_from_checkpoint(str(tmp_path / "m.ckpt"))
    assert loaded.hparams.lr == 0.01
    assert torch.equal(flat_weights(loaded), flat_weights(model))


def test_early_stopping_ends_fit(tmp_path):
    train, val = loaders()
    stopper = EarlyStopping(monitor="val_loss", patience=0, min_delta=10.0)  # nothing improves by 10
    trainer = quiet_trainer(max_epochs=20, callbacks=[stopper])
    trainer.fit(DropoutNet(), train, val)
    assert trainer.current_epoch == 2  # epoch 0 sets the best, epoch 1 fails to improve


def test_csv_logger_records_epoch_metrics(tmp_path):
    train, val = loaders()
    trainer = quiet_trainer(max_epochs=2, logger=CSVLogger(tmp_path), log_every_n_steps=5)
    trainer.fit(DropoutNet(), train, val)
    with open(f"{trainer.log_dir}/metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert any(row.get("val_loss") for row in rows)
    assert any(row.get("train_loss_step") for row in rows)
    assert sum(1 for row in rows if row.get("train_loss_epoch")) == 2


def test_crash_while_saving_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "state.ckpt"
    atomic_save({"generation": 1}, path)

    def torn_save(obj, handle):
        handle.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_io, "save_marked", torn_save)  # torch.save, with the marker record first
    with pytest.raises(OSError, match="disk full"):
        atomic_save({"generation": 2}, path)
    monkeypatch.undo()
    assert load_checkpoint_file(path) == {"generation": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.ckpt"], "no temporary file is left behind"


def test_ctrl_c_ends_cleanly_and_the_last_checkpoint_resumes(tmp_path):
    train, val = loaders()

    class CtrlC(tm.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if trainer.global_step == 30:
                raise KeyboardInterrupt

    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=10, save_last=True)
    trainer = quiet_trainer(max_epochs=5, callbacks=[CtrlC(), checkpoint], enable_checkpointing=True)
    with pytest.raises(SystemExit):  # Lightning 2.6's sys.exit(1) after the exception hooks
        trainer.fit(DropoutNet(), train, val)
    last = load_checkpoint_file(tmp_path / "last.ckpt")
    assert last["global_step"] == 20  # the interrupt came before step 30's save
    trainer = quiet_trainer(max_epochs=5)
    trainer.fit(DropoutNet(), train, val, ckpt_path=str(tmp_path / "last.ckpt"))
    assert trainer.global_step == 60


@pytest.mark.parametrize("exact", [False, True])
def test_fit_from_last_with_no_checkpoint_yet_starts_from_scratch(tmp_path, caplog, exact):
    # A script a scheduler restarts passes ckpt_path="last" every time, the first time included: Lightning's
    # warning (a named resume, as Lightning's), or trainmesh's one line with Trainer(exact_resume=True).
    train, val = loaders()
    trainer = quiet_trainer(max_epochs=1, default_root_dir=tmp_path, enable_checkpointing=True, exact_resume=exact)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(DropoutNet(), train, val, ckpt_path="last")
    assert trainer.global_step == 12
    out = said(caplog)
    lightning_words = '.fit(ckpt_path="last") is set, but there is no last checkpoint available.'
    assert sum(lightning_words in str(w.message) for w in caught) == (0 if exact else 1)
    if exact:
        assert f"ckpt_path='last': no checkpoint found under {tmp_path}; starting from scratch" in out
        assert out.count("starting from scratch") == 1, "one line"

    restarted = quiet_trainer(max_epochs=2, default_root_dir=tmp_path, enable_checkpointing=True, exact_resume=exact)
    restarted.fit(DropoutNet(), train, val, ckpt_path="last")
    assert restarted.global_step == 24, "the restart resumed from the first run's last.ckpt"
    assert "starting from scratch" not in said(caplog)


def test_fit_from_last_looks_in_the_checkpoint_callbacks_own_folder(tmp_path):
    # A last.ckpt outside default_root_dir must be found, not replaced by a fresh start.
    train, val = loaders()
    elsewhere = tmp_path / "elsewhere"

    def trainer(epochs):
        return quiet_trainer(
            max_epochs=epochs,
            default_root_dir=tmp_path / "root",
            enable_checkpointing=True,
            callbacks=[ModelCheckpoint(dirpath=elsewhere, save_last=True)],
        )

    trainer(1).fit(DropoutNet(), train, val)
    restarted = trainer(2)
    restarted.fit(DropoutNet(), train, val, ckpt_path="last")
    assert restarted.global_step == 24


def test_fit_from_a_missing_file_or_from_best_is_still_an_error(tmp_path):
    train, _ = loaders()
    trainer = quiet_trainer(max_epochs=1, default_root_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="Checkpoint file not found: .*gone.ckpt"):  # Lightning's words
        trainer.fit(DropoutNet(), train, ckpt_path=str(tmp_path / "gone.ckpt"))
    with pytest.raises(
        ValueError, match=r"`.fit\(ckpt_path=\"best\"\)` is set but `ModelCheckpoint` is not configured"
    ):
        trainer.fit(DropoutNet(), train, ckpt_path="best")


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_evaluating_from_last_with_no_checkpoint_is_an_error(tmp_path, stage):
    _, val = loaders()
    trainer = quiet_trainer(default_root_dir=tmp_path)
    with pytest.raises(ValueError, match=f"ckpt_path='last': no checkpoint found under {tmp_path}.*{stage}"):
        getattr(trainer, stage)(DropoutNet(), val, ckpt_path="last")
