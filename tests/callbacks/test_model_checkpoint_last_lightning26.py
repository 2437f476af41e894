"""When ``ModelCheckpoint(save_last=...)`` writes ``last.ckpt``, run under Lightning 2.6.6 and trainmesh
on the same program for a small matrix of settings: the files left in the folder (``last.ckpt`` a link
or a file), the step ``last.ckpt`` holds, and what ``trainer.test(ckpt_path="last")`` measures.

The validation loss follows a fixed schedule by epoch (best at epoch 1 of 4), so a top-k save stops
after epoch 1 and Lightning 2.6's rule (last.ckpt only beside a checkpoint written at that step, or,
with ``"link"``, a link to the newest one; at the fit's end only if nothing was written) shows."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402

VAL_LOSS_BY_EPOCH = (3.0, 1.0, 2.0, 2.5)

SETTINGS = {
    "monitor": {"monitor": "val_loss", "save_last": True},
    "monitor_link": {"monitor": "val_loss", "save_last": "link"},
    "monitor_top0": {"monitor": "val_loss", "save_top_k": 0, "save_last": True},
    "monitor_all": {"monitor": "val_loss", "save_top_k": -1, "save_last": True},
    "monitor_every3epochs": {"monitor": "val_loss", "every_n_epochs": 3, "save_last": True},
    "monitor_after_val": {"monitor": "val_loss", "save_on_train_epoch_end": False, "save_last": True},
    "monitor_steps": {"monitor": "val_loss", "every_n_train_steps": 3, "save_last": True},
    "no_monitor_every2epochs": {"every_n_epochs": 2, "save_last": True},
    "no_monitor_steps": {"every_n_train_steps": 3, "save_last": True},
    "no_monitor_steps_link": {"every_n_train_steps": 3, "save_last": "link"},
    "no_monitor_top0": {"save_top_k": 0, "save_last": True},
}


def _model(framework):
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", torch.tensor(VAL_LOSS_BY_EPOCH[self.current_epoch]))

        def test_step(self, batch, batch_idx):
            x, y = batch
            self.log("test_loss", torch.nn.functional.mse_loss(self.layer(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Model()


def _run(framework, root, settings) -> dict:
    torch.manual_seed(0)
    model = _model(framework)
    data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    train, val = DataLoader(data, batch_size=4), DataLoader(data, batch_size=16)
    checkpoint = framework.callbacks.ModelCheckpoint(dirpath=root / "ckpt", **settings)
    trainer = framework.Trainer(
        max_epochs=len(VAL_LOSS_BY_EPOCH),
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        callbacks=[checkpoint],
    )
    trainer.fit(model, train, val)
    folder = checkpoint.dirpath
    files = sorted(
        f"{name} -> {os.readlink(os.path.join(folder, name))}" if os.path.islink(os.path.join(folder, name)) else name
        for name in os.listdir(folder)
    )
    last = os.path.join(folder, "last.ckpt")
    last_step = torch.load(last, weights_only=False)["global_step"] if os.path.exists(last) else None
    tested = trainer.test(model, val, ckpt_path="last", verbose=False) if last_step is not None else None
    test_loss = round(tested[0]["test_loss"], 5) if tested else None
    return {"files": files, "last_step": last_step, "test_loss": test_loss}


def test_last_ckpt_is_written_where_lightning_26_writes_it(tmp_path) -> None:
    found: dict[str, dict] = {"lightning": {}, "trainmesh": {}}
    for name, settings in SETTINGS.items():
        for label, framework in (("lightning", L), ("trainmesh", tm)):
            found[label][name] = _run(framework, tmp_path / label / name, settings)
    # The case the matrix is about, measured: the best is epoch 1 (step 8), the fit ends at step 16.
    assert found["lightning"]["monitor"]["last_step"] == 8
    differing = {name: (found["lightning"][name], found["trainmesh"][name]) for name in SETTINGS}
    differing = {name: pair for name, pair in differing.items() if pair[0] != pair[1]}
    assert differing == {}


def test_a_save_last_string_other_than_link_is_refused() -> None:
    # Lightning 2.6 takes any value and treats a string as True: a typo would silently copy, not link.
    with pytest.raises(ValueError, match=r"save_last='links'.*'link'"):
        tm.callbacks.ModelCheckpoint(save_last="links")
    assert tm.callbacks.ModelCheckpoint(save_last="link").save_last == "link"


def test_fast_dev_run_leaves_last_ckpt_as_lightning_26_does(tmp_path) -> None:
    """Lightning 2.6 skips every save under ``fast_dev_run`` but its ``on_train_end`` writes
    ``last.ckpt`` where nothing was written (measured: a last.ckpt of step 1)."""
    found = {}
    for label, framework in (("lightning", L), ("trainmesh", tm)):
        torch.manual_seed(0)
        model = _model(framework)
        data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
        checkpoint = framework.callbacks.ModelCheckpoint(dirpath=tmp_path / label, monitor="val_loss", save_last=True)
        trainer = framework.Trainer(
            fast_dev_run=True, accelerator="cpu", enable_progress_bar=False, enable_model_summary=False,
            callbacks=[checkpoint],
        )  # fmt: skip
        trainer.fit(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=16))
        files = sorted(os.listdir(tmp_path / label)) if (tmp_path / label).exists() else []
        last = tmp_path / label / "last.ckpt"
        found[label] = (files, torch.load(last, weights_only=False)["global_step"] if last.exists() else None)
    assert found["lightning"] == (["last.ckpt"], 1)
    assert found["trainmesh"] == found["lightning"]
