"""Lightning 2.6's ``ModelCheckpoint(save_on_exception=, train_time_interval=)`` and its positional
order, run under Lightning 2.6.6 and trainmesh on the same program: the files written (names), and
what the checkpoint saved at the exception holds (step, epoch, weights)."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402


def _model_class(framework, fail_at_step: int | None):
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            if fail_at_step is not None and self.global_step == fail_at_step:
                raise RuntimeError("boom")
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Model


def _fit(framework, root, checkpoint, *, fail_at_step=None, max_epochs=2):
    torch.manual_seed(0)
    model = _model_class(framework, fail_at_step)()
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    trainer = framework.Trainer(
        max_epochs=max_epochs,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=[checkpoint],
    )
    if fail_at_step is None:
        trainer.fit(model, loader)
    else:
        with pytest.raises(RuntimeError, match="boom"):
            trainer.fit(model, loader)
    return sorted(os.listdir(checkpoint.dirpath)) if os.path.isdir(checkpoint.dirpath) else []


def _both(tmp_path, make_checkpoint, **kwargs):
    found = {}
    for framework in (L, tm):
        root = tmp_path / framework.__name__
        found[framework] = _fit(framework, root, make_checkpoint(framework, root / "ckpts"), **kwargs)
    return found[L], found[tm]


def test_save_on_exception_saves_where_the_run_stands_as_lightning(tmp_path) -> None:
    def make(framework, dirpath):
        return framework.callbacks.ModelCheckpoint(dirpath=dirpath, save_on_exception=True, save_last=True)

    theirs, ours = _both(tmp_path, make, fail_at_step=6)
    assert theirs == ours == ["epoch=0-step=4.ckpt", "epoch=1-step=6.ckpt", "last.ckpt"]
    saved = {
        framework: torch.load(tmp_path / framework.__name__ / "ckpts" / "epoch=1-step=6.ckpt", weights_only=False)
        for framework in (L, tm)
    }
    for key in ("global_step", "epoch"):
        assert saved[L][key] == saved[tm][key], key
    for name, value in saved[L]["state_dict"].items():
        torch.testing.assert_close(saved[tm]["state_dict"][name], value, rtol=0, atol=0)


def test_save_on_exception_off_writes_nothing_more(tmp_path) -> None:
    def make(framework, dirpath):
        return framework.callbacks.ModelCheckpoint(dirpath=dirpath)

    theirs, ours = _both(tmp_path, make, fail_at_step=6)
    assert theirs == ours == ["epoch=0-step=4.ckpt"]


@pytest.mark.parametrize(
    ("interval", "top_k"), [(timedelta(0), -1), (timedelta(hours=1), -1)], ids=["every-batch", "never"]
)
def test_train_time_interval_saves_as_lightning(tmp_path, interval, top_k) -> None:
    def make(framework, dirpath):
        return framework.callbacks.ModelCheckpoint(dirpath=dirpath, save_top_k=top_k, train_time_interval=interval)

    theirs, ours = _both(tmp_path, make)
    assert theirs == ours
    assert len(ours) == (8 if interval == timedelta(0) else 0)


def test_lightning_s_positional_order_and_refusals(tmp_path) -> None:
    for framework in (L, tm):
        checkpoint = framework.callbacks.ModelCheckpoint(tmp_path, None, None, False, None, -1, True, True)
        assert (checkpoint.save_on_exception, checkpoint.save_weights_only) == (True, True)
        with pytest.raises(Exception, match="mutually exclusive|the only cadence"):
            framework.callbacks.ModelCheckpoint(train_time_interval=timedelta(seconds=1), every_n_train_steps=2)


def test_a_subclass_calling_the_built_in_hooks_by_keyword_saves_as_lightning(tmp_path) -> None:
    # Lightning names the hooks' parameters (trainer, pl_module, ...); a subclass passing them by
    # keyword to super() reaches the same saves.
    def make(framework, dirpath):
        class Keyword(framework.callbacks.ModelCheckpoint):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                super().on_train_batch_end(
                    trainer=trainer, pl_module=pl_module, outputs=outputs, batch=batch, batch_idx=batch_idx
                )

            def on_train_epoch_end(self, trainer, pl_module):
                super().on_train_epoch_end(trainer=trainer, pl_module=pl_module)

        return Keyword(dirpath=dirpath, every_n_train_steps=3, save_top_k=-1)

    theirs, ours = _both(tmp_path, make)
    assert theirs == ours == ["epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt"]


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"monitor": "val_loss", "mode": "max"}, {"every_n_train_steps": 3}, {"train_time_interval": timedelta(1)}],
)
def test_the_state_key_is_lightning_s(kwargs):
    """Before: trainmesh left ``'train_time_interval': None`` out of the key, so a Lightning 2.6
    checkpoint's ModelCheckpoint state (and its profiler action names) had another name."""
    assert tm.callbacks.ModelCheckpoint(**kwargs).state_key == L.callbacks.ModelCheckpoint(**kwargs).state_key


def test_a_state_saved_under_the_key_before_is_still_restored():
    from trainmesh.callbacks.base import load_callback_state

    checkpoint = tm.callbacks.ModelCheckpoint(every_n_train_steps=3)
    older = "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 3, 'every_n_epochs': 0}"
    load_callback_state(checkpoint, {older: {"best_model_path": "a.ckpt", "last_model_path": "last.ckpt"}})
    assert (checkpoint.best_model_path, checkpoint.last_model_path) == ("a.ckpt", "last.ckpt")


def _missing_key_messages(framework, root) -> tuple[list[str], str]:
    """The warning (no validation yet) and the exception (after a validation) for a monitor nobody logs."""

    class Validated(_model_class(framework, None)):
        def validation_step(self, batch, batch_idx):
            return None

    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    options = dict(max_epochs=1, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.warns(UserWarning) as record:
        checkpoint = framework.callbacks.ModelCheckpoint(dirpath=root / "a", monitor="val_loss")
        framework.Trainer(default_root_dir=root, callbacks=[checkpoint], **options).fit(Validated(), loader)
    warned = [str(w.message) for w in record if "monitored key" in str(w.message)]
    checkpoint = framework.callbacks.ModelCheckpoint(dirpath=root / "b", monitor="val_loss")
    with pytest.raises(framework.utilities.exceptions.MisconfigurationException) as raised:
        framework.Trainer(default_root_dir=root, callbacks=[checkpoint], **options).fit(Validated(), loader, loader)
    return warned, str(raised.value)


def test_a_monitor_nobody_logs_is_reported_in_lightnings_words(tmp_path) -> None:
    # Lightning 2.6 and pytorch-lightning 1.9.5 share the words (l-progs12 p10c, a StarGAN sending val_loss to
    # logger.log_metrics only); trainmesh's explanation follows them. Before: its own sentence.
    lightning_warned, lightning_raised = _missing_key_messages(L, tmp_path / "lightning")
    warned, raised = _missing_key_messages(tm, tmp_path / "trainmesh")
    assert len(warned) == len(lightning_warned) == 1 and warned[0].startswith(lightning_warned[0])
    assert raised.startswith(lightning_raised)
