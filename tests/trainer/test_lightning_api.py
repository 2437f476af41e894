"""Lightning programs ported by renaming imports and classes only: the names and behaviours
they rely on (issue 13). Single process, tiny models, a few steps."""

from __future__ import annotations

import argparse
import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.loggers import CSVLogger


def _data(n: int = 16, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g))


def _trainer(tmp_path, **kw) -> tm.Trainer:
    settings = dict(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    settings.update(kw)
    return tm.Trainer(**settings)


class FullSignature(tm.Module):
    def __init__(self, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 2)
        self.calls: list[str] = []

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.cross_entropy(self(x), y))

    def predict_step(self, batch, batch_idx):  # the default is forward(batch), as Lightning's: batch is a pair
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class ShortSignature(FullSignature):
    """Every step and batch hook without ``batch_idx``, as many Lightning programs write them."""

    def training_step(self, batch):
        return super().training_step(batch, 0)

    def validation_step(self, batch):
        self.calls.append("validation_step")
        return super().validation_step(batch, 0)

    def test_step(self, batch):
        self.calls.append("test_step")
        return super().test_step(batch, 0)

    def predict_step(self, batch):
        return self(batch[0])

    def on_train_batch_start(self, batch):
        self.calls.append("on_train_batch_start")

    def on_train_batch_end(self, outputs, batch):
        self.calls.append("on_train_batch_end")

    def on_validation_batch_end(self, outputs):
        self.calls.append("on_validation_batch_end")


class ShortCallback(tm.Callback):
    def __init__(self):
        self.calls = 0

    def on_train_batch_end(self, trainer, module, outputs):
        self.calls += 1


def test_hooks_without_batch_idx_train_like_the_full_signature(tmp_path):
    """Parity: the same weights as the same model with (batch, batch_idx) hooks."""
    trained = []
    for cls in (FullSignature, ShortSignature):
        torch.manual_seed(0)
        model, callback = cls(), ShortCallback()
        # validating after the third batch: max_steps stopping inside the epoch does not validate (as Lightning)
        trainer = _trainer(tmp_path, max_steps=3, val_check_interval=3, callbacks=[callback])
        trainer.fit(model, DataLoader(_data(), batch_size=4), DataLoader(_data(8, 1), batch_size=4))
        trained.append(model.layer.weight.detach().clone())
        assert callback.calls == 3
    assert torch.equal(trained[0], trained[1])
    assert model.calls.count("on_train_batch_start") == 3 and model.calls.count("on_train_batch_end") == 3
    assert model.calls.count("validation_step") == 2 and model.calls.count("on_validation_batch_end") == 2
    trainer.test(model, DataLoader(_data(8), batch_size=4), verbose=False)
    assert model.calls.count("test_step") == 2
    predictions = trainer.predict(model, DataLoader(_data(8), batch_size=4))
    assert len(predictions) == 2 and predictions[0].shape == (4, 2)


class LightningStyleData:
    """A data module as Lightning programs define it, not derived from tm.DataModule."""

    def prepare_data(self):
        pass

    def setup(self, stage):
        self.stages = getattr(self, "stages", []) + [stage]

    def teardown(self, stage):
        pass

    def train_dataloader(self):
        return DataLoader(_data(), batch_size=4)

    def val_dataloader(self):
        return DataLoader(_data(8, 1), batch_size=4)

    def test_dataloader(self):
        return DataLoader(_data(8, 2), batch_size=4)

    def predict_dataloader(self):
        return DataLoader(_data(8, 3), batch_size=4)


class TrainmeshData(tm.DataModule):
    def train_dataloader(self):
        return DataLoader(_data(), batch_size=4)

    def test_dataloader(self):
        return DataLoader(_data(8, 2), batch_size=4)


def test_datamodule_passed_positionally(tmp_path):
    for dm in (LightningStyleData(), TrainmeshData()):
        model, trainer = FullSignature(), _trainer(tmp_path, max_steps=2, limit_val_batches=1)
        trainer.fit(model, dm)
        assert trainer.global_step == 2 and trainer.datamodule is dm
        assert trainer.test(model, dm, verbose=False)[0]["test_loss"] > 0
    assert trainer.validate(model, LightningStyleData(), verbose=False)[0]["val_loss"] > 0
    assert len(trainer.predict(model, LightningStyleData())) == 2
    with pytest.raises(ValueError, match="datamodule= is given too"):
        trainer.fit(model, LightningStyleData(), datamodule=TrainmeshData())


class DataWithHparams(LightningStyleData, tm.DataModule):
    def __init__(self, batch_size: int = 4, data_dir: str = "/nowhere", secret: str = "x", log: bool = True):
        super().__init__()
        self.save_hyperparameters(ignore=["data_dir"], logger=log)


class NamespaceModel(FullSignature):
    def __init__(self, args: argparse.Namespace):
        super().__init__(lr=args.lr)
        self.save_hyperparameters(args)


def test_save_hyperparameters_forms_checkpoints_and_loggers(tmp_path):
    import yaml

    dm = DataWithHparams(batch_size=4)
    assert dm.hparams == {"batch_size": 4, "secret": "x", "log": True} and dm.hparams.batch_size == 4
    model = NamespaceModel(argparse.Namespace(lr=0.05, width=3))
    # Lightning 2.6's: the base class's save_hyperparameters() collects the subclass's arguments too
    assert model.hparams == {"lr": 0.05, "args": argparse.Namespace(lr=0.05, width=3), "width": 3}
    plain = FullSignature()
    plain.save_hyperparameters({"lr": 0.2, "extra": "y"}, ignore="extra", logger=False)
    assert plain.hparams == {"lr": 0.2}
    with pytest.raises(ValueError, match="argument names"):
        # on another module: Lightning sets logger=True before it refuses, and so does trainmesh
        FullSignature().save_hyperparameters(3)

    logger = CSVLogger(tmp_path, name="hp")
    trainer = _trainer(tmp_path, max_steps=1, logger=logger, limit_val_batches=1)
    trainer.fit(model, dm)
    logged = yaml.unsafe_load(open(f"{logger.log_dir}/hparams.yaml"))  # a Namespace: yaml.dump's Python tag
    assert logged == {"batch_size": 4, "secret": "x", "log": True, "lr": 0.05, "width": 3, "args": model.hparams.args}
    trainer.save_checkpoint(tmp_path / "hp.ckpt")
    checkpoint = torch.load(tmp_path / "hp.ckpt", weights_only=False)
    assert checkpoint["datamodule_hyper_parameters"] == {"batch_size": 4, "secret": "x", "log": True}
    assert checkpoint["hyper_parameters"] == {"lr": 0.05, "args": model.hparams.args, "width": 3}

    # logger=False on both: in checkpoints, not in the loggers.
    logger = CSVLogger(tmp_path, name="quiet")
    trainer = _trainer(tmp_path, max_steps=1, logger=logger, limit_val_batches=1)
    trainer.fit(plain, DataWithHparams(log=False))
    quiet_file = f"{logger.log_dir}/hparams.yaml"
    assert not os.path.exists(quiet_file) or not yaml.safe_load(open(quiet_file))
    trainer.save_checkpoint(tmp_path / "quiet.ckpt")
    checkpoint = torch.load(tmp_path / "quiet.ckpt", weights_only=False)
    assert checkpoint["hyper_parameters"] == {"lr": 0.2}
    assert checkpoint["datamodule_hyper_parameters"]["log"] is False


def test_checkpoint_loads_with_weights_only_and_rebuilds_the_module(tmp_path):
    import numpy as np

    from trainmesh.seed import capture_rng_state, restore_rng_state

    np.random.seed(3)
    model, dm = FullSignature(lr=0.1), DataWithHparams()
    trainer = _trainer(tmp_path, max_steps=2, limit_val_batches=1)
    trainer.fit(model, dm)
    trainer.save_checkpoint(tmp_path / "plain.ckpt")
    checkpoint = torch.load(tmp_path / "plain.ckpt", weights_only=True)  # torch >= 2.6's default
    assert "numpy" in checkpoint["rng"] and checkpoint["datamodule_hyper_parameters"]["batch_size"] == 4
    rebuilt = FullSignature.load_from_checkpoint(
        checkpoint_path=str(tmp_path / "plain.ckpt"), map_location="cpu", strict=True, lr=0.3
    )
    assert rebuilt.hparams.lr == 0.3 and torch.equal(rebuilt.layer.weight, model.layer.weight)

    # The numpy generator comes back from the tensor form and from a checkpoint of the old (ndarray) form.
    state = capture_rng_state()
    expected = np.random.rand(3)
    restore_rng_state(state)
    assert np.array_equal(np.random.rand(3), expected)
    old_form = np.random.get_state()
    after_old_form = np.random.rand(3)
    restore_rng_state({**state, "numpy": old_form})
    assert np.array_equal(np.random.rand(3), after_old_form)


def test_metrics_are_tensors_and_callbacks_still_read_them(tmp_path):
    from trainmesh.callbacks import EarlyStopping, ModelCheckpoint

    class Probe(tm.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.step_loss = trainer.callback_metrics["train_loss"].item()

    best = ModelCheckpoint(dirpath=tmp_path / "ckpt", filename="{epoch}-{val_loss:.4f}", monitor="val_loss")
    probe = Probe()
    trainer = _trainer(
        tmp_path,
        max_epochs=2,
        callbacks=[probe, best, EarlyStopping(monitor="val_loss")],
        enable_checkpointing=True,
        logger=CSVLogger(tmp_path, name="t"),
        log_every_n_steps=1,
    )
    trainer.fit(FullSignature(), DataLoader(_data(), batch_size=4), DataLoader(_data(8, 1), batch_size=4))
    metrics, logged = trainer.callback_metrics, trainer.logged_metrics
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in [*metrics.values(), *logged.values()])
    assert isinstance(probe.step_loss, float) and logged["train_loss"].item() == probe.step_loss
    assert best.best_model_path.endswith(f"val_loss={best.best_model_score:.4f}.ckpt")
    assert best.best_model_score <= metrics["val_loss"].item()  # ranked by the exact float value
