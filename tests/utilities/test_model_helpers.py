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


def _fit_and_save(framework, tmp_path, module):
    trainer = framework.Trainer(
        max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path
    )
    trainer.fit(module, torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 2)), batch_size=2))
    path = str(tmp_path / "saved.ckpt")
    trainer.save_checkpoint(path)
    return path


def _load_on_instance(framework, tmp_path):
    class Net(framework.LightningModule):
        def __init__(self, width=2):
            super().__init__()
            self.save_hyperparameters()
            self.layer = torch.nn.Linear(width, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Data(framework.LightningDataModule):
        def __init__(self, size=4):
            super().__init__()
            self.save_hyperparameters()

    net = Net()
    path = _fit_and_save(framework, tmp_path, net)
    seen = {}
    for name, made in (("module", net), ("data", Data())):
        try:
            made.load_from_checkpoint(path)  # on the instance: the result (a new object) is lost
            seen[name] = "returned"
        except TypeError as error:
            seen[name] = (type(error).__name__, str(error).replace(type(made).__name__, "X"))
    seen["on the class"] = type(Net.load_from_checkpoint(path)).__name__  # the documented call still works
    return seen


def test_load_from_checkpoint_on_an_instance_raises_as_lightnings(tmp_path):
    """A program calling ``model.load_from_checkpoint(path)`` on an instance (discarding the loaded
    model: a cross-validation script that then scored the last weights, not the best) stops with
    Lightning 2.6's TypeError, as under Lightning; before, trainmesh returned a new model silently."""
    (tmp_path / "pl").mkdir()
    (tmp_path / "tm").mkdir()
    theirs = _load_on_instance(pl, tmp_path / "pl")
    ours = _load_on_instance(tm, tmp_path / "tm")
    assert ours == theirs
    assert theirs["module"][0] == "TypeError"
