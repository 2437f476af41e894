"""A checkpoint ModelCheckpoint writes after a validation inside an epoch (``val_check_interval`` below
1: in its on_validation_end, as Lightning 2.6's, so at the step Lightning's is) resumes exactly: the
same weights and the same logger steps as the run that was not interrupted."""

from __future__ import annotations

import csv
import os

import torch

import trainmesh as tm
from helpers.models import DropoutNet, flat_weights, loaders, quiet_trainer


def _fit(root, ckpt_path=None, max_epochs=2):
    tm.seed_everything(3)
    checkpoint = tm.callbacks.ModelCheckpoint(dirpath=root / "ckpt", monitor="val_loss", save_top_k=-1)
    trainer = quiet_trainer(
        max_epochs=max_epochs,
        val_check_interval=0.5,
        log_every_n_steps=1,
        enable_checkpointing=True,
        callbacks=[checkpoint],
        logger=tm.loggers.CSVLogger(root, name="logs", version=0),
        default_root_dir=root,
        exact_resume=True,  # the resumed fit == the run that never stopped
    )
    module = DropoutNet()
    trainer.fit(module, *loaders(), ckpt_path=ckpt_path)
    return trainer, module


def _rows(root):
    with open(root / "logs" / "version_0" / "metrics.csv") as f:
        return [(row["step"], sorted(k for k, v in row.items() if v)) for row in csv.DictReader(f)]


def test_the_save_after_a_mid_epoch_validation_is_at_its_step_and_resumes_exactly(tmp_path):
    trainer, whole = _fit(tmp_path / "whole")
    # 12 batches an epoch, validation after batches 6 and 12: saved at steps 6 and 12, 18 and 24
    assert sorted(os.listdir(tmp_path / "whole" / "ckpt")) == [
        "epoch=0-step=12.ckpt",
        "epoch=0-step=6.ckpt",
        "epoch=1-step=18.ckpt",
        "epoch=1-step=24.ckpt",
    ]
    saved = torch.load(tmp_path / "whole" / "ckpt" / "epoch=1-step=18.ckpt", weights_only=False)
    assert (saved["global_step"], saved["loop"]["batches_done"], saved["loop"]["batches_stepped"]) == (18, 6, 18)

    resumed_root = tmp_path / "resumed"
    resumed_root.mkdir()
    _, resumed = _fit(resumed_root, ckpt_path=tmp_path / "whole" / "ckpt" / "epoch=1-step=18.ckpt")
    assert torch.equal(flat_weights(resumed), flat_weights(whole))
    after = [row for row in _rows(tmp_path / "whole") if int(row[0]) >= 18]
    assert _rows(resumed_root) == after  # the same steps and columns from the resume on
