"""How often a fit's checkpoint saves run the save hooks (the module's and a callback's
``on_save_checkpoint``, a callback's ``state_dict``), under Lightning 2.6.6 and trainmesh on the same
program: the Trainer's default checkpointing, and ModelCheckpoints of the program's own.

The default callback is Lightning's ``ModelCheckpoint()`` (one file, no ``last.ckpt``), so the hooks run
once per save point; a program's own ``save_last=True`` builds both files, as Lightning's does."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402

VAL_LOSS_BY_EPOCH = (2.0, 1.0)

SETTINGS = {
    "default": None,  # the Trainer's own ModelCheckpoint
    "save_last": {"save_last": True},
    "save_last_link": {"save_last": "link"},
    "top2_monitor": {"save_top_k": 2, "monitor": "val_loss"},
    "top2_monitor_last": {"save_top_k": 2, "monitor": "val_loss", "save_last": True},
    "every_3_steps": {"every_n_train_steps": 3},
    "every_3_steps_last": {"every_n_train_steps": 3, "save_last": True},
}


def _run(framework, root, settings) -> list[str]:
    calls: list[str] = []

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", torch.tensor(VAL_LOSS_BY_EPOCH[self.current_epoch]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_save_checkpoint(self, checkpoint):
            calls.append(f"module.on_save_checkpoint@{self.global_step}")

    class Recorder(framework.Callback):
        def on_save_checkpoint(self, trainer, pl_module, checkpoint):
            calls.append(f"callback.on_save_checkpoint@{trainer.global_step}")

        def state_dict(self):
            calls.append("callback.state_dict")
            return {"saved": True}

    callbacks = [Recorder()]
    if settings is not None:
        callbacks.append(framework.callbacks.ModelCheckpoint(dirpath=root / "ckpt", **settings))
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2)
    trainer = framework.Trainer(
        max_epochs=len(VAL_LOSS_BY_EPOCH),
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        callbacks=callbacks,
    )
    trainer.fit(Model(), loader, loader)
    return calls


@pytest.mark.parametrize("name", list(SETTINGS))
def test_save_hooks_run_as_under_lightning(tmp_path, name):
    settings = SETTINGS[name]
    expected = _run(L, tmp_path / "lightning", settings)
    assert _run(tm, tmp_path / "trainmesh", settings) == expected


@pytest.mark.parametrize("wraps", [True, False], ids=["wrapped", "replaced"])
def test_default_saves_through_trainer_save_checkpoint(tmp_path, wraps):
    """A program that wraps (or replaces) ``trainer.save_checkpoint`` sees the default callback call it once
    per save point, as under Lightning; replaced, no file is written under either."""
    import importlib
    from unittest import mock

    def fit(framework, root):
        trainer = framework.Trainer(
            max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=root
        )
        model = importlib.import_module(f"{framework.__name__}.demos.boring_classes").BoringModel()
        with mock.patch.object(trainer, "save_checkpoint", wraps=trainer.save_checkpoint if wraps else None) as save:
            trainer.fit(model)
        folder = root / "checkpoints"
        files = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
        return [os.path.basename(call.args[0]) for call in save.call_args_list], files

    calls, files = fit(tm, tmp_path / "trainmesh")
    lightning_calls, lightning_files = fit(L, tmp_path / "lightning")
    assert calls == lightning_calls == ["epoch=0-step=64.ckpt", "epoch=1-step=128.ckpt"]
    assert files == (lightning_files if wraps else [])
    assert lightning_files == (["epoch=1-step=128.ckpt"] if wraps else [])
