"""ModelCheckpoint's file names and argument checks as Lightning 2.6 has them, run under Lightning 2.6.6
and under trainmesh (the same program): ``monitor="epoch"`` / ``"step"`` (Lightning ranks by the
Trainer's counters when they are not logged), templates that already write ``name=`` (Lightning
inserts it again), a metric name with ``/`` (a sub-folder), ``format_checkpoint_name(metrics,
filename=, ver=, prefix=)`` and which exception a bad argument raises (from Lightning's own tests,
tests_pytorch/checkpointing/test_model_checkpoint.py)."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")

CHECKPOINTS = {
    "by_step": dict(monitor="step", mode="max", save_top_k=2),
    "by_epoch": dict(monitor="epoch", mode="max", filename="{epoch}", save_last=True),
    "named_twice": dict(monitor="val_loss", filename="run-{epoch}-val_loss={val_loss:.2f}", save_top_k=-1),
    "slash": dict(monitor="val/loss", filename="{epoch}-{val/loss:.2f}"),
    "versions": dict(monitor="step", filename="fixed", save_top_k=-1),  # STARTING_VERSION = 9 below
    "kept_all": dict(monitor="val_loss", mode="max", filename="{epoch}-{step}", save_top_k=-1),
    # saved twice an epoch under one name: Lightning overwrites its previous best file (no -v1)
    "unmonitored_same_name": dict(filename="{epoch}", save_top_k=-1, every_n_train_steps=1),
}


def names_written(L, root):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            loss = self.net(batch[0]).pow(2).mean()
            self.log("val_loss", loss)
            self.log("val/loss", loss)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    callbacks = {name: L.callbacks.ModelCheckpoint(dirpath=root / name, **kw) for name, kw in CHECKPOINTS.items()}
    callbacks["versions"].STARTING_VERSION = 9
    data = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=3, callbacks=list(callbacks.values()), logger=False))
    trainer.fit(Model(), data, data)
    found = {}
    for name, checkpoint in callbacks.items():
        files = sorted(str(p.relative_to(root / name)) for p in (root / name).rglob("*") if p.is_file())
        best = os.path.relpath(checkpoint.best_model_path, root / name) if checkpoint.best_model_path else ""
        score = None if checkpoint.best_model_score is None else round(float(checkpoint.best_model_score), 6)
        found[name] = {"files": files, "best": best, "score": score}
    return found


def test_file_names_and_monitored_counters_as_lightning_s(tmp_path):
    """Before: ``monitor="step"`` / ``"epoch"`` stopped the fit (not among the logged metrics), a
    template's ``val_loss=`` was not doubled and ``val/loss`` was written ``val_loss``."""
    found = run_both(names_written, tmp_path)
    assert found["lightning"]["by_step"]["files"] == ["epoch=1-step=4.ckpt", "epoch=2-step=6.ckpt"]
    assert found["trainmesh"] == found["lightning"]


def formatted(L, root):
    checkpoint = L.callbacks.ModelCheckpoint(dirpath=root, filename="{epoch}-{val_loss:.2f}")
    default = L.callbacks.ModelCheckpoint()
    names = [
        checkpoint.format_checkpoint_name({"epoch": 2, "val_loss": torch.tensor(0.123456)}),
        checkpoint.format_checkpoint_name({"epoch": 2, "val_loss": 0.12}, filename="{epoch:d}"),
        checkpoint.format_checkpoint_name({"epoch": 2}, ver=3),
        checkpoint.format_checkpoint_name({"epoch": 2, "val_loss": 0.5}, "last", prefix="run"),
        default.format_checkpoint_name({"epoch": 3, "step": 2}),
        default.format_checkpoint_name({}, filename="{missing:d}"),
        L.callbacks.ModelCheckpoint(filename="{epoch}-{epoch_loss}").format_checkpoint_name(
            {"epoch": torch.tensor(1), "epoch_loss": torch.tensor(0.5)}
        ),
    ]
    joined = L.callbacks.ModelCheckpoint(filename="{epoch},{acc:.5f}")
    joined.CHECKPOINT_JOIN_CHAR, joined.CHECKPOINT_EQUALS_CHAR = "@", ":"
    names += [
        joined.format_checkpoint_name({"epoch": 3, "acc": 0.03}, prefix="test"),
        joined.format_checkpoint_name({"epoch": 3, "acc": 0.03}, ver=2),
    ]
    return [os.path.relpath(name, root) if os.path.isabs(name) else name for name in names]


def test_format_checkpoint_name_takes_lightning_s_arguments(tmp_path):
    found = run_both(formatted, tmp_path)
    assert found["lightning"][0] == "epoch=2-val_loss=0.12.ckpt"
    assert found["trainmesh"] == found["lightning"]


def restored_elsewhere(L, root):
    old = L.callbacks.ModelCheckpoint(dirpath=root / "old", monitor="m")
    old.best_model_path, old.best_model_score = str(root / "old" / "a.ckpt"), torch.tensor(0.1)
    moved = L.callbacks.ModelCheckpoint(dirpath=root / "new", monitor="m")
    moved.load_state_dict(old.state_dict())
    return [os.path.relpath(moved.best_model_path, root), moved.best_model_score]


def test_a_state_from_another_folder_keeps_only_the_best_path(tmp_path):
    """Before: trainmesh kept ``best_model_score`` too (Lightning's own test_model_checkpoint_saveload_ckpt)."""
    found = run_both(restored_elsewhere, tmp_path)
    assert found["trainmesh"] == found["lightning"] == [os.path.join("old", "a.ckpt"), None]


BAD = [
    dict(save_top_k=-3),
    dict(every_n_epochs=-3),
    dict(every_n_train_steps=-3),
    dict(mode="unknown_option"),
    dict(every_n_train_steps=1, every_n_epochs=2),
    dict(train_time_interval=timedelta(minutes=1), every_n_epochs=2),
    dict(save_top_k=3),
]


def refusals(L, root):
    from importlib import import_module

    exceptions = import_module(f"{L.pl.__name__}.utilities.exceptions")
    caught = []
    for kwargs in BAD:
        try:
            L.callbacks.ModelCheckpoint(dirpath=root, **kwargs)
            caught.append("accepted")
        except exceptions.MisconfigurationException:
            caught.append("MisconfigurationException")
        except Exception as exc:  # noqa: BLE001 - which type is the point
            caught.append(type(exc).__name__)
    return caught


def test_bad_arguments_raise_what_lightning_raises(tmp_path):
    """Before: ``ValueError`` (a program catching ``MisconfigurationException`` missed it), and
    ``every_n_train_steps`` with ``every_n_epochs`` was accepted."""
    found = run_both(refusals, tmp_path)
    assert set(found["lightning"]) == {"MisconfigurationException"}
    assert found["trainmesh"] == found["lightning"]


def checkpointing_off(L, root):
    from importlib import import_module

    exceptions = import_module(f"{L.pl.__name__}.utilities.exceptions")
    try:
        L.pl.Trainer(enable_checkpointing=False, callbacks=[L.callbacks.ModelCheckpoint(dirpath=root)], logger=False)
    except exceptions.MisconfigurationException:
        return "MisconfigurationException"
    except Exception as exc:  # noqa: BLE001 - which type is the point
        return type(exc).__name__
    return "accepted"


def test_checkpointing_off_with_a_model_checkpoint_raises_what_lightning_raises(tmp_path):
    """Lightning's test_configure_model_checkpoint; before: a ValueError only."""
    found = run_both(checkpointing_off, tmp_path)
    assert found["trainmesh"] == found["lightning"] == "MisconfigurationException"


def ranked_at_the_last_batch(L, root):
    """Lightning's test_model_checkpoint_step_interval_val_metric: every_n_train_steps equal to the
    epoch's batches, a validation metric rising each epoch."""
    scores = [0.1, 0.5, 1.0]

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.log("auroc", torch.tensor(scores[self.current_epoch]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    checkpoint = L.callbacks.ModelCheckpoint(
        dirpath=root, monitor="auroc", mode="max", every_n_train_steps=2, save_on_train_epoch_end=False
    )
    data = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    trainer = L.pl.Trainer(
        **trainer_kwargs(root, max_epochs=3, callbacks=[checkpoint], num_sanity_val_steps=0, logger=False)
    )
    trainer.fit(Model(), data, DataLoader(TensorDataset(torch.randn(2, 2)), batch_size=2))
    return [float(checkpoint.best_model_score), os.path.basename(checkpoint.best_model_path)]


def test_a_step_save_at_the_epoch_s_last_batch_ranks_by_the_validation_after_it(tmp_path):
    """Before: trainmesh ranked by the previous epoch's auroc (best 0.5, not 1.0)."""
    found = run_both(ranked_at_the_last_batch, tmp_path)
    assert found["lightning"] == [1.0, "epoch=2-step=6.ckpt"]
    assert found["trainmesh"] == found["lightning"]
