"""A ``CombinedLoader`` of two loaders (2 and 3 batches) in each mode, as the train, validation,
test and predict loader, under Lightning 2.6 and under trainmesh: the batches each step reads
(with ``batch_idx`` and ``dataloader_idx``), the ``dataloader_idx`` the callbacks' batch hooks get,
``trainer.num_*_batches``, the keys logged (``/dataloader_idx_N``), what the call returns, and the
error where Lightning refuses the mode (its type and words, and where: a sequential train loader
after ``on_train_epoch_start``).

Lightning counts an evaluation's batches per inner loader whatever the mode
(``num_val_batches == [2, 3]`` while ``max_size_cycle`` reads 3 combined batches); trainmesh
counted the combined loader ([3]). Lightning's ``trainer.predict`` refuses every mode but
``sequential``; trainmesh predicted on combined batches.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

pytest.importorskip("lightning.pytorch")

MODES = ["max_size_cycle", "min_size", "max_size", "sequential"]


def _framework(name: str) -> tuple[Any, Any]:
    if name == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch.utilities import CombinedLoader

        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
        return pl, CombinedLoader
    import trainmesh as pl
    from trainmesh.utilities import CombinedLoader

    return pl, CombinedLoader


def _described(batch: Any) -> Any:
    if isinstance(batch, dict):
        return {k: _described(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [_described(v) for v in batch]
    return None if batch is None else batch.tolist()


def _first(batch: Any) -> torch.Tensor:
    while isinstance(batch, (dict, list, tuple)):
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return torch.zeros(1) if batch is None else batch


def run(name: str, stage: str, mode: str, kind: str, root, **settings) -> dict[str, Any]:
    pl, CombinedLoader = _framework(name)

    class Hooks(pl.Callback):
        def __init__(self):
            self.calls = []

        def on_train_epoch_start(self, trainer, module):
            self.calls.append(("train_epoch_start", trainer.num_training_batches))

        def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
            self.calls.append(("val", batch_idx, dataloader_idx))

        def on_test_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
            self.calls.append(("test", batch_idx, dataloader_idx))

        def on_predict_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
            self.calls.append(("predict", batch_idx, dataloader_idx))

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))
            self.seen = []

        def training_step(self, batch, batch_idx):
            self.seen.append(("train", batch_idx, _described(batch)))
            loss = (_first(batch).float().mean() * self.w).sum()
            self.log("train_value", loss, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.seen.append(("val", batch_idx, dataloader_idx, _described(batch)))
            self.log("val_value", _first(batch).float().mean())

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            self.seen.append(("test", batch_idx, dataloader_idx, _described(batch)))
            self.log("test_value", _first(batch).float().mean())

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            self.seen.append(("predict", batch_idx, dataloader_idx, _described(batch)))
            return _first(batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    a = DataLoader(torch.arange(0, 4).float(), batch_size=2)  # 2 batches
    b = DataLoader(torch.arange(10, 16).float(), batch_size=2)  # 3 batches
    combined = CombinedLoader({"a": a, "b": b} if kind == "dict" else [a, b], mode)
    model, hooks = Model(), Hooks()
    settings = dict(num_sanity_val_steps=0, max_epochs=1) | settings
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[hooks],
        default_root_dir=root,
        **settings,
    )
    found: dict[str, Any] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if stage == "train":
                trainer.fit(model, combined)
            elif stage == "fit_val":
                trainer.fit(model, DataLoader(torch.arange(2).float(), batch_size=2), combined)
                found["num"] = (trainer.num_val_batches, trainer.num_sanity_val_batches)
            elif stage == "predict":
                found["returned"] = _described(trainer.predict(model, combined))
                found["num"] = trainer.num_predict_batches
            else:
                found["returned"] = getattr(trainer, stage)(model, combined, verbose=False)
                found["num"] = trainer.num_val_batches if stage == "validate" else trainer.num_test_batches
    except ValueError as error:
        found["error"] = f"{type(error).__name__}: {error}"
    if stage == "train":  # sequential: counted (the sum), then refused after on_train_epoch_start
        found["num"] = (trainer.num_training_batches, trainer.fit_loop.epoch_progress.current.started)
    found.update(seen=model.seen, calls=hooks.calls, keys=sorted(trainer.callback_metrics))
    return found


@pytest.mark.parametrize("stage", ["train", "fit_val", "validate", "test", "predict"])
def test_a_combined_loader_runs_as_lightning_s_in_every_mode(stage, tmp_path):
    for mode in MODES:
        for kind in ("list", "dict"):
            theirs = run("lightning", stage, mode, kind, tmp_path)
            assert run("trainmesh", stage, mode, kind, tmp_path) == theirs, (mode, kind)


def test_the_limits_and_the_sanity_check_count_each_inner_loader_as_lightning_s(tmp_path):
    settings = dict(num_sanity_val_steps=1, limit_val_batches=2, limit_train_batches=1)
    for mode in ("max_size_cycle", "min_size"):
        theirs = run("lightning", "fit_val", mode, "list", tmp_path, **settings)
        assert run("trainmesh", "fit_val", mode, "list", tmp_path, **settings) == theirs, mode
    assert run("lightning", "validate", "max_size_cycle", "list", tmp_path)["num"] == [2, 3]  # the owner's count
