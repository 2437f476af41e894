"""Lightning's small built-in callbacks (LambdaCallback, Checkpoint, OnExceptionCheckpoint), each run
on the same program under Lightning 2.6 and under trainmesh and compared."""

import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")

import trainmesh as tm  # noqa: E402
from trainmesh.callbacks import Checkpoint, LambdaCallback, ModelCheckpoint, OnExceptionCheckpoint  # noqa: E402
from trainmesh.callbacks.base import HOOK_NAMES  # noqa: E402
from trainmesh.utilities.exceptions import MisconfigurationException  # noqa: E402


def _model_class(base, fail_at=None):
    class Regressor(base):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, batch_idx):
            if fail_at is not None and self.global_step == fail_at:
                raise RuntimeError("stop here")
            x, y = batch
            return F.mse_loss(self(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", F.mse_loss(self(x), y))

        def test_step(self, batch, batch_idx):
            x, y = batch
            self.log("test_loss", F.mse_loss(self(x), y))

        def predict_step(self, batch, batch_idx):
            return self(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Regressor()


def _loader():
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(8, 3, generator=g), torch.randn(8, 1, generator=g)), batch_size=4)


def _settings(tmp_path, **kw):
    settings = dict(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    settings.update(enable_model_summary=False, default_root_dir=tmp_path, num_sanity_val_steps=1)
    settings.update(kw)
    return settings


def _recorder(calls):
    hooks = sorted(set(HOOK_NAMES) & set(dir(L.Callback)))
    return {name: (lambda *args, name=name, **kw: calls.append(name)) for name in hooks}


def test_lambda_callback_calls_each_given_hook_where_lightning_does(tmp_path):
    ours, theirs = [], []
    for frameworks, calls in (
        ((tm.Trainer, tm.Module, LambdaCallback), ours),
        ((L.Trainer, L.LightningModule, L.callbacks.LambdaCallback), theirs),
    ):
        trainer_class, base, lambda_class = frameworks
        trainer = trainer_class(
            **_settings(tmp_path / base.__name__, enable_checkpointing=False),
            callbacks=[lambda_class(**_recorder(calls))],
        )
        model = _model_class(base)
        trainer.fit(model, _loader(), _loader())
        trainer.validate(model, _loader())
        trainer.test(model, _loader())
        trainer.predict(model, _loader())
    assert ours == theirs
    with pytest.raises(TypeError, match="on_train_strat"):
        LambdaCallback(on_train_strat=print)


def test_a_checkpoint_callback_stands_instead_of_the_default_model_checkpoint(tmp_path):
    class Own(Checkpoint):
        pass

    ours = tm.Trainer(**_settings(tmp_path), callbacks=[Own()])
    theirs = L.Trainer(**_settings(tmp_path), callbacks=[L.callbacks.Checkpoint()])
    assert not any(isinstance(cb, ModelCheckpoint) for cb in ours.callbacks)
    assert not any(isinstance(cb, L.callbacks.ModelCheckpoint) for cb in theirs.callbacks)
    assert isinstance(ours.callbacks[-1], Own)
    with pytest.raises(MisconfigurationException, match="enable_checkpointing=False"):  # Lightning's exception
        tm.Trainer(**_settings(tmp_path, enable_checkpointing=False), callbacks=[OnExceptionCheckpoint(tmp_path)])


def test_on_exception_checkpoint_saves_where_lightning_saves_and_removes_it_after_a_clean_run(tmp_path):
    for name, trainer_class, base, callback_class in (
        ("ours", tm.Trainer, tm.Module, OnExceptionCheckpoint),
        ("theirs", L.Trainer, L.LightningModule, L.callbacks.OnExceptionCheckpoint),
    ):
        where = tmp_path / name
        callback = callback_class(where, filename="crash")
        trainer = trainer_class(**_settings(where), callbacks=[callback])
        with pytest.raises(RuntimeError, match="stop here"):
            trainer.fit(_model_class(base, fail_at=3), _loader())
        assert os.path.exists(callback.ckpt_path), name
        saved = torch.load(callback.ckpt_path, weights_only=False)
        assert saved["global_step"] == 3 and saved["epoch"] == 1, name
        trainer = trainer_class(**_settings(where), callbacks=[callback_class(where, filename="crash")])
        trainer.fit(_model_class(base), _loader())
        assert not os.path.exists(callback.ckpt_path), name
    with pytest.raises(ValueError, match="filename"):
        OnExceptionCheckpoint(tmp_path, filename="")
