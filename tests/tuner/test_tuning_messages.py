"""The Tuner's lines as Lightning 2.6 logs them: ``LR finder stopped early after N steps ...``, ``Learning
rate set to X``, ``Batch size A succeeded, trying batch size B``, ``Applying margin ...``, ``Finished batch
size finder, ...``, and those about its temporary checkpoint (``weights_only`` ..., ``Restoring states from
the checkpoint path at .../.lr_find_<uuid>.ckpt``, ``Restored all states ...``)."""

from __future__ import annotations

import logging
import re
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.models import quiet_trainer

_NOT_OURS = ("litlogger", "litmodels", "available")


def _lines(framework, tmp_path, caplog, mode) -> list[str]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)
            self.lr, self.batch_size = 0.01, 4
            self.data = TensorDataset(torch.randn(256, 3), torch.randn(256, 1))

        def train_dataloader(self):
            return DataLoader(self.data, batch_size=self.batch_size, shuffle=True)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    torch.manual_seed(0)
    trainer = quiet_trainer(
        framework=framework,
        max_epochs=1,
        default_root_dir=tmp_path,
    )
    tuner, model = framework.tuner.Tuner(trainer), Model()
    caplog.clear()
    tuner.lr_find(model, num_training=40)
    tuner.scale_batch_size(model, mode=mode, max_trials=4, steps_per_trial=1)
    lines = [r.getMessage() for r in caplog.records if not any(word in r.getMessage() for word in _NOT_OURS)]
    # the temporary checkpoints' names: <default_root_dir>/.lr_find_<uuid>.ckpt, .scale_batch_size_<uuid>.ckpt
    return [re.sub(r"at .*/\.(\w+?)_[0-9a-f-]{36}\.ckpt", r"at DIR/.\1_UUID.ckpt", line) for line in lines]


@pytest.mark.parametrize("mode", ["power", "binsearch"])
def test_the_tuner_logs_lightning_s_lines(tmp_path, caplog, mode) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    caplog.set_level(logging.INFO)
    expected = _lines(lightning, tmp_path / "lightning", caplog, mode)
    assert any(line.startswith("Learning rate set to") for line in expected)
    assert "Batch size 2 succeeded, trying batch size 4" in expected
    assert "Restored all states from the checkpoint at DIR/.scale_batch_size_UUID.ckpt" in expected
    assert _lines(trainmesh, tmp_path / "trainmesh", caplog, mode) == expected


def _batch_size_warnings(framework, tmp_path) -> list[str]:
    class Model(framework.LightningModule):
        def __init__(self, batch_size: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.batch_size = batch_size  # in both places: Lightning warns
            self.layer = torch.nn.Linear(3, 1)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(16, 3)), batch_size=self.batch_size)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    trainer = quiet_trainer(
        framework=framework,
        max_epochs=1,
        default_root_dir=tmp_path,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        framework.tuner.Tuner(trainer).scale_batch_size(Model(), steps_per_trial=1, max_trials=1)
    return [str(w.message) for w in caught if "batch_size" in str(w.message)]


def test_a_batch_size_on_the_module_and_in_hparams_warns_as_lightning(tmp_path) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _batch_size_warnings(lightning, tmp_path / "lightning")
    assert expected and _batch_size_warnings(trainmesh, tmp_path / "trainmesh") == expected


def _two_optimizers_error(framework, tmp_path) -> tuple[str, str]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization, self.lr = False, 0.01
            self.layer = torch.nn.Linear(3, 1)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4)

        def training_step(self, batch, batch_idx):
            pass

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr), torch.optim.Adam(self.parameters(), lr=self.lr)

    trainer = quiet_trainer(framework=framework, max_epochs=1, default_root_dir=tmp_path)
    misconfiguration = framework.utilities.exceptions.MisconfigurationException
    with pytest.raises(misconfiguration) as raised:  # was: a ValueError, which a program's except missed
        framework.tuner.Tuner(trainer).lr_find(Model())
    return "MisconfigurationException", str(raised.value)  # (trainmesh's: still a ValueError too)


def test_lr_find_refuses_two_optimizers_with_lightning_s_exception(tmp_path) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _two_optimizers_error(lightning, tmp_path / "lightning")
    assert _two_optimizers_error(trainmesh, tmp_path / "trainmesh") == expected


def _configured_finder_error(framework, tmp_path, search: str) -> tuple[str, str]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer, self.lr, self.batch_size = torch.nn.Linear(3, 1), 0.01, 2

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=self.batch_size)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    finder = (
        framework.callbacks.BatchSizeFinder()
        if search == "scale_batch_size"
        else framework.callbacks.LearningRateFinder()
    )
    trainer = quiet_trainer(framework=framework, max_epochs=1, default_root_dir=tmp_path, callbacks=[finder])
    with pytest.raises(ValueError) as raised:  # was: the Tuner searched, and the callback again in its fit
        getattr(framework.tuner.Tuner(trainer), search)(Model())
    return type(raised.value).__name__, str(raised.value)


@pytest.mark.parametrize("search", ["scale_batch_size", "lr_find"])
def test_a_tuner_on_a_trainer_with_the_finder_callback_is_refused_as_lightning(tmp_path, search) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _configured_finder_error(lightning, tmp_path / "lightning", search)
    assert "already configured" in expected[1]
    assert _configured_finder_error(trainmesh, tmp_path / "trainmesh", search) == expected


def _callback_lines(framework, tmp_path, caplog) -> list[str]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)
            self.lr = 0.01

        def train_dataloader(self):
            data = TensorDataset(torch.randn(64, 3), torch.randn(64, 1))
            return DataLoader(data, batch_size=4)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    torch.manual_seed(0)
    finder = framework.callbacks.LearningRateFinder(num_training_steps=20)
    trainer = quiet_trainer(framework=framework, max_epochs=1, default_root_dir=tmp_path, callbacks=[finder])
    caplog.clear()
    trainer.fit(Model())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(("Learning rate set", "Restor"))]
    return [re.sub(r"at .*/\.(\w+?)_[0-9a-f-]{36}\.ckpt", r"at DIR/.\1_UUID.ckpt", line) for line in lines]


def test_the_finder_callback_says_the_rate_it_sets_as_lightning(tmp_path, caplog) -> None:
    """LearningRateFinder (the callback) logs ``Learning rate set to X`` as it applies its suggestion, as
    Lightning's (l-progs17 p01, a LightningCLI config with the callback: before, trainmesh said nothing)."""
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    caplog.set_level(logging.INFO)
    expected = _callback_lines(lightning, tmp_path / "lightning", caplog)
    assert any(line.startswith("Learning rate set to") for line in expected)
    assert _callback_lines(trainmesh, tmp_path / "trainmesh", caplog) == expected
