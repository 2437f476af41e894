"""What Lightning-AI/tutorials' programs (lightning_examples/, campaign of issue 36, branch u-tut)
showed trainmesh doing differently from Lightning 2.6, each as a small program of our own run under
Lightning 2.6 and under its port (tests/helpers/programs.py) and compared as data."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")
pytest.importorskip("tensorboard")


def _files(root):
    """The files under ``root``, relative, TensorBoard's event files by their kind only (their
    names hold the time and host)."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            name = str(path.relative_to(root))
            found.append(name.split("events.out.tfevents")[0] + "events" if "events.out.tfevents" in name else name)
    return found


def default_logger_without_hyperparameters(L, root):
    """The mnist-hello-world tutorial's first model: the default logger (TensorBoard), no
    ``save_hyperparameters``, nothing logged by the steps; fit, then test. Lightning's Trainer
    calls each logger's ``save()`` at a run's start, which opens TensorBoard's event file and
    writes ``hparams.yaml``; trainmesh wrote neither."""
    seen = {}

    class Files(L.pl.Callback):
        def on_train_start(self, trainer, pl_module):
            seen["on_train_start"] = _files(root)

        def on_test_start(self, trainer, pl_module):
            seen["on_test_start"] = _files(root)

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.l1(x), y)

        def test_step(self, batch, batch_idx):
            x, y = batch
            F.cross_entropy(self.l1(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.02)

    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(12, 4, generator=g), torch.randint(0, 2, (12,), generator=g))
    model = Model()
    trainer = L.pl.Trainer(callbacks=[Files()], **trainer_kwargs(root, max_epochs=1))
    trainer.fit(model, DataLoader(data, batch_size=4))
    trainer.test(model, DataLoader(data, batch_size=4))
    seen["end"] = _files(root)
    found = outcome(trainer, model, root, seen=seen)
    found["files"] = _files(root)
    return found


def test_the_default_logger_writes_its_files_at_the_run_s_start(tmp_path):
    found = run_both(default_logger_without_hyperparameters, tmp_path)
    assert found["lightning"]["extra"]["seen"]["on_train_start"] == [
        "lightning_logs/version_0/events",
        "lightning_logs/version_0/hparams.yaml",
    ]
    assert differences(found["lightning"], found["trainmesh"]) == []


# pytorch-lightning 1.9.5's `pytorch_lightning.profiler` classes (recorded in /work/ref/pl19:
# its public classes; 2.0 removed the module): the trainer-flags tutorial imports AdvancedProfiler
# from there, and its port `from trainmesh.profiler import AdvancedProfiler` was an ImportError.
PROFILER_1_9 = (
    "AdvancedProfiler",
    "PassThroughProfiler",
    "Profiler",
    "PyTorchProfiler",
    "SimpleProfiler",
    "XLAProfiler",
)


def test_lightning_1_x_profiler_module_holds_today_s_profilers(tmp_path):
    import trainmesh.profiler as old
    from trainmesh import profilers
    from trainmesh.utilities.refusal import LightningOneName

    assert sorted(old.__all__) == sorted(PROFILER_1_9)
    for name in ("AdvancedProfiler", "PassThroughProfiler", "SimpleProfiler"):
        with pytest.warns(LightningOneName, match=f"trainmesh.profilers.{name}"):
            profiler = getattr(old, name)()
        assert isinstance(profiler, getattr(profilers, name))
    assert old.XLAProfiler is profilers.XLAProfiler  # refused with its reason, as today's


def test_devices_of_a_wrong_type_raise_lightning_s_exception_type():
    """``Trainer(devices=1.5)``: Lightning 2.6 refuses it with a TypeError; trainmesh raised a ValueError.
    (``devices=None``, which the reinforce-learning-DQN tutorial passes and 2.6 refuses too, runs as
    pytorch-lightning 1.9.5 runs it, on every device: tests/trainer/test_lightning1_examples.py.)"""
    import lightning.pytorch as pl

    import trainmesh as tm

    with pytest.raises(TypeError) as theirs:
        pl.Trainer(accelerator="cpu", devices=1.5, logger=False)
    with pytest.raises(TypeError, match="devices=1.5") as ours:
        tm.Trainer(accelerator="cpu", devices=1.5, logger=False)
    assert isinstance(ours.value, ValueError)  # still trainmesh's devices error
    assert "devices" in str(theirs.value)
