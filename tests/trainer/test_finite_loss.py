"""The finiteness check read from the device at intervals (the accelerator's path, exercised on
CPU here): training still stops at the first non-finite loss, names that step, and no
checkpoint holds weights a non-finite step produced. The per-step CPU check is in
test_bad_input.py (test_nan_loss_stops_with_the_step_and_weights_untouched)."""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import trainmesh as tm
from helpers.models import quiet_trainer, random_classification
from trainmesh.callbacks.model_checkpoint import ModelCheckpoint
from trainmesh.checkpoint.io import load_checkpoint_file
from trainmesh.trainer import finite_loss


class GoesNaN(tm.Module):
    """A small classifier whose loss is NaN from global step ``bad_step`` on."""

    def __init__(self, bad_step: int) -> None:
        super().__init__()
        self.bad_step = bad_step
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss * float("nan") if self.global_step >= self.bad_step else loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _train_loader() -> DataLoader:
    return DataLoader(random_classification(96), batch_size=8)  # 12 batches


@pytest.fixture
def deferred(monkeypatch):
    # The accelerator's (deferred) check, run on CPU.
    monkeypatch.setattr(
        finite_loss.FiniteLossCheck, "for_device", classmethod(lambda cls, trainer, device: cls(trainer, deferred=True))
    )


class LastBatchSeen(tm.Callback):
    def __init__(self) -> None:
        self.batch_idx = -1

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.batch_idx = batch_idx


def test_deferred_check_names_the_first_bad_step_and_keeps_the_last_good_checkpoint(deferred, tmp_path):
    checkpoints = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)
    trainer = quiet_trainer(max_epochs=1, enable_checkpointing=True, callbacks=[checkpoints], log_every_n_steps=50)
    with pytest.raises(FloatingPointError) as info:
        trainer.fit(GoesNaN(bad_step=7), _train_loader())
    message = str(info.value)
    # Read when the checkpoint of step 9 was about to be built: steps 7 and 8 had run since the
    # read before (the checkpoint of step 6), and step 7 is the first bad one.
    assert "loss is nan at global step 7 (epoch 0, batch 7)" in message
    assert "1 more batch ran after it" in message
    saved = {load_checkpoint_file(path)["global_step"]: path for path in tmp_path.glob("*.ckpt")}
    assert sorted(saved) == [3, 6]  # the checkpoint of step 9 was refused
    assert not [p for p in tmp_path.iterdir() if p.suffix != ".ckpt"]  # nor left half-written
    last = load_checkpoint_file(saved[6])
    assert all(torch.isfinite(value).all() for value in last["state_dict"].values())
    assert str(saved[6]) in message  # named as the last good checkpoint


def test_deferred_check_reads_at_the_logging_cadence(deferred):
    seen = LastBatchSeen()
    trainer = quiet_trainer(max_epochs=1, callbacks=[seen], log_every_n_steps=4)
    with pytest.raises(FloatingPointError) as info:
        trainer.fit(GoesNaN(bad_step=5), _train_loader())
    message = str(info.value)
    # Read with the step's logging, after the optimizer step that made global_step 8 (batches 4..7
    # recorded since the read at step 4): as Lightning logs, after that batch's on_train_batch_end.
    assert "loss is nan at global step 5 (epoch 0, batch 5)" in message
    assert "2 more batches ran after it" in message
    assert "no checkpoint had been written yet" in message
    assert seen.batch_idx == 7


def test_deferred_check_refuses_a_checkpoint_after_the_failure(deferred, tmp_path):
    trainer = quiet_trainer(max_epochs=1, log_every_n_steps=50)
    model = GoesNaN(bad_step=10)
    with pytest.raises(FloatingPointError, match="global step 10"):
        trainer.fit(model, _train_loader())  # read at the end of the epoch
    with pytest.raises(FloatingPointError, match="global step 10"):
        trainer.save_checkpoint(tmp_path / "after.ckpt")
    assert not (tmp_path / "after.ckpt").exists()


def test_deferred_check_lets_a_finite_run_finish_and_save(deferred, tmp_path):
    trainer = quiet_trainer(max_epochs=2, log_every_n_steps=5)
    trainer.fit(GoesNaN(bad_step=10**6), _train_loader())
    assert trainer.global_step == 24
    trainer.save_checkpoint(tmp_path / "done.ckpt")
    assert load_checkpoint_file(tmp_path / "done.ckpt")["global_step"] == 24


@pytest.mark.cuda
def test_on_cuda_the_check_is_deferred_and_still_keeps_the_last_good_checkpoint(tmp_path):
    checkpoints = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)
    trainer = quiet_trainer(accelerator="cuda", max_epochs=1, enable_checkpointing=True, callbacks=[checkpoints])
    with pytest.raises(FloatingPointError, match=r"global step 7 \(epoch 0, batch 7\).*1 more batch ran after it"):
        trainer.fit(GoesNaN(bad_step=7), _train_loader())
    saved = {load_checkpoint_file(path)["global_step"]: path for path in Path(tmp_path).glob("*.ckpt")}
    assert sorted(saved) == [3, 6]
    assert all(math.isfinite(float(v.abs().max())) for v in load_checkpoint_file(saved[6])["state_dict"].values())
