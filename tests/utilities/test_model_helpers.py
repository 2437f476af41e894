"""``trainmesh.utilities.model_helpers`` against Lightning 2.6's ``utilities.model_helpers``: the same
classes built on each framework's bases give the same ``is_overridden`` answers; and the Lightning
names a port keeps (``LightningModule``, ``LightningDataModule``, ``Module.on_gpu``)."""

import functools
from unittest.mock import Mock

import pytest
import torch

import trainmesh as tm
from trainmesh.utilities.model_helpers import is_overridden

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.utilities.model_helpers import is_overridden as pl_is_overridden  # noqa: E402


def _classes(module_base, data_base, callback_base):
    def wrapper(function):
        @functools.wraps(function)
        def wrapped(*args, **kwargs):
            return function(*args, **kwargs)

        return wrapped

    class Net(module_base):
        def training_step(self, batch, batch_idx):
            return None

        @wrapper
        def on_fit_start(self):
            pass

    class Data(data_base):
        def train_dataloader(self):
            return []

    class Watch(callback_base):
        def on_train_start(self, trainer, module):
            pass

    partial_net = Net()
    partial_net.on_train_end = functools.partial(module_base.on_train_end, partial_net)
    mocked = Net()
    mocked.on_validation_start = Mock(wraps=lambda: None)
    return Net(), Data(), Watch(), partial_net, mocked


CASES = [
    (0, "training_step"),
    (0, "validation_step"),
    (0, "on_fit_start"),  # through functools.wraps
    (0, "on_train_start"),
    (1, "train_dataloader"),
    (1, "val_dataloader"),
    (2, "on_train_start"),
    (2, "on_fit_end"),
    (3, "on_train_end"),  # a partial of the base's own hook
    (4, "on_validation_start"),  # Mock(wraps=...)
    (0, "not_a_hook"),
]


@pytest.mark.parametrize(("which", "name"), CASES)
def test_is_overridden_is_lightnings(which, name):
    ours = _classes(tm.LightningModule, tm.LightningDataModule, tm.Callback)[which]
    theirs = _classes(pl.LightningModule, pl.LightningDataModule, pl.Callback)[which]
    assert is_overridden(name, ours) == pl_is_overridden(name, theirs)


def test_is_overridden_edges_are_lightnings():
    assert is_overridden("training_step", None) is pl_is_overridden("training_step", None) is False
    for check in (is_overridden, pl_is_overridden):
        with pytest.raises(ValueError, match="Expected a parent"):
            check("forward", torch.nn.Linear(1, 1))
    assert is_overridden("forward", torch.nn.Linear(1, 1), torch.nn.Module)


def test_the_names_a_port_keeps():
    assert tm.LightningModule is tm.Module and tm.LightningDataModule is tm.DataModule

    class Net(tm.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

    class PlNet(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

    assert Net().on_gpu == PlNet().on_gpu is False
    if torch.cuda.is_available():
        assert Net().cuda().on_gpu == PlNet().cuda().on_gpu is True
