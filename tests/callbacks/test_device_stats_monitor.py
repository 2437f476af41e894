"""DeviceStatsMonitor (callbacks/device_stats_monitor.py) against Lightning 2.6's on CPU. psutil is
not installed here, so a stand-in ``psutil`` module with fixed readings is put in ``sys.modules``
(and Lightning's check of the installed distribution is told it is there): the same program (fit
with validation every epoch, log_every_n_steps=2, then test) sends the loggers the same
``DeviceStatsMonitor.{hook}/{stat}`` keys, values and steps as Lightning's. Without psutil both
refuse the same way; with ``cpu_stats=False`` neither logs; without a logger both refuse."""

import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.callbacks import DeviceStatsMonitor
from trainmesh.loggers import Logger

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.callbacks import DeviceStatsMonitor as PlMonitor  # noqa: E402
from lightning.pytorch.loggers import Logger as PlLogger  # noqa: E402


def make_logger(base):
    class Recorder(base):
        def __init__(self, root):
            super().__init__()
            self.rows, self.root = [], root

        name, version = "recorder", 0

        @property
        def log_dir(self):
            return self.root

        def log_hyperparams(self, params, *args, **kwargs):
            pass

        def log_metrics(self, metrics, step=None):
            self.rows.extend((key, value, step) for key, value in metrics.items() if key.startswith("DeviceStats"))

    return Recorder


def make_module(base):
    class Net(base):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[1])

        validation_step = test_step = training_step

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net


def run(lightning, tmp, *, cpu_stats=None, logger=True):
    base, logger_base, trainer_class, monitor = (
        (pl.LightningModule, PlLogger, pl.Trainer, PlMonitor)
        if lightning
        else (tm.LightningModule, Logger, tm.Trainer, DeviceStatsMonitor)
    )
    recorder = make_logger(logger_base)(str(tmp))
    data = DataLoader(TensorDataset(torch.randn(10, 2), torch.randn(10, 1)), batch_size=2)
    trainer = trainer_class(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        logger=recorder if logger else False,
        log_every_n_steps=2,
        enable_progress_bar=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp),
        callbacks=[monitor(cpu_stats=cpu_stats)],
    )
    model = make_module(base)()
    trainer.fit(model, data, data)
    trainer.test(model, data)
    return recorder.rows


@pytest.fixture
def fake_psutil(monkeypatch):
    readings = types.SimpleNamespace(percent=12.5)
    fake = types.ModuleType("psutil")
    fake.virtual_memory = fake.swap_memory = lambda: readings
    fake.cpu_percent = lambda: 50.0
    monkeypatch.setitem(sys.modules, "psutil", fake)
    import lightning.pytorch.accelerators.cpu as pl_cpu
    import lightning.pytorch.callbacks.device_stats_monitor as pl_monitor

    monkeypatch.setattr(pl_cpu, "_PSUTIL_AVAILABLE", True)
    monkeypatch.setattr(pl_monitor, "_PSUTIL_AVAILABLE", True)


def test_logs_what_lightning_logs(tmp_path, fake_psutil):
    theirs = run(True, tmp_path / "pl")
    ours = run(False, tmp_path / "tm")
    assert {key.split("/")[0] for key, _, _ in ours} == {
        f"DeviceStatsMonitor.on_{stage}_batch_{end}"
        for stage in ("train", "validation", "test")
        for end in ("start", "end")
    }
    assert ours == theirs


def test_cpu_stats_false_logs_nothing(tmp_path, fake_psutil):
    assert run(False, tmp_path / "tm", cpu_stats=False) == run(True, tmp_path / "pl", cpu_stats=False) == []


@pytest.mark.skipif("psutil" in sys.modules, reason="psutil is installed")
def test_without_psutil_refused_as_lightning(tmp_path):
    found = []
    for lightning in (True, False):
        with pytest.raises(ModuleNotFoundError, match="cannot log CPU stats as `psutil` is not installed") as error:
            run(lightning, tmp_path / str(lightning))
        found.append(str(error.value))
    assert found[0] == found[1]


def test_without_logger_refused_as_lightning(tmp_path, fake_psutil):
    """Lightning's MisconfigurationException (trainmesh's is also a ValueError)."""
    from lightning.pytorch.utilities.exceptions import MisconfigurationException as PlMisconfiguration

    from trainmesh.utilities.exceptions import MisconfigurationException

    match = "Cannot use `DeviceStatsMonitor` callback with `Trainer\\(logger=False\\)`"
    with pytest.raises(PlMisconfiguration, match=match):
        run(True, tmp_path / "pl", logger=False)
    with pytest.raises(MisconfigurationException, match=match):
        run(False, tmp_path / "tm", logger=False)
