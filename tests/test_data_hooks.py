"""The data hooks a Module and a DataModule share, with Lightning's defaults: the batch hooks hand
the batch on, and transfer_batch_to_device is Lightning's move_data_to_device (tensors and objects
with a .to method, in nested containers); the loader methods are the base class's, raising Lightning's error."""

import dataclasses
import functools
import inspect

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.data_hooks import DataHooks


class Encoding(dict):
    """Like a tokenizer's BatchEncoding: a mapping that moves itself with .to()."""

    def to(self, device):
        return Encoding({key: value.to(device) for key, value in self.items()}, moved=True)

    def __init__(self, *args, moved=False):
        super().__init__(*args)
        self.moved = moved


class InPlace:
    def __init__(self):
        self.device = None

    def to(self, device):  # moves itself and returns None (some batch classes do)
        self.device = torch.device(device)


@dataclasses.dataclass
class Pair:
    x: torch.Tensor
    label: str


def test_the_default_transfer_moves_what_lightnings_moves():
    meta = torch.device("meta")
    in_place = InPlace()
    batch = {"pair": Pair(torch.ones(2), "a"), "enc": Encoding({"ids": torch.ones(3)}), "obj": in_place, "n": 3}
    for owner in (tm.Module(), tm.DataModule()):
        moved = owner.transfer_batch_to_device(batch, meta, 0)
        assert moved["pair"].x.device == meta and moved["pair"].label == "a"
        assert moved["enc"].moved and moved["enc"]["ids"].device == meta
        assert moved["obj"] is in_place and in_place.device == meta
        assert moved["n"] == 3


def test_the_batch_hooks_hand_the_batch_on_by_default():
    batch = [torch.ones(1)]
    for owner in (tm.Module(), tm.DataModule()):
        assert isinstance(owner, DataHooks)
        assert owner.on_before_batch_transfer(batch, 0) is batch
        assert owner.on_after_batch_transfer(batch, 1) is batch


_LOADERS = ("train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")


def _framework(name):
    return pytest.importorskip("lightning.pytorch") if name == "lightning" else tm


def _recorded_fit(pl):
    """A hook recorder as Lightning's tests/models/test_hooks.py builds one: every loader method and a
    few anchors of the base class wrapped on the instance; then a short fit and test."""
    called = []

    class Recorded(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            bases = {name for name, _ in inspect.getmembers(pl.LightningModule, inspect.isfunction)}
            for name in sorted(bases & {*_LOADERS, "on_fit_start", "on_train_start", "setup"}):
                setattr(self, name, functools.partial(self._record, name, getattr(self, name)))

        def _record(self, name, method, *args, **kwargs):
            called.append(name)
            return method(*args, **kwargs)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            self.log("v", self.layer(batch[0]).sum())

        test_step = validation_step

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)

        val_dataloader = test_dataloader = train_dataloader

    model = Recorded()
    trainer = pl.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(model)
    trainer.test(model, verbose=False)
    return called


def test_a_hook_recorder_built_from_the_base_class_sees_the_loader_calls_lightning_makes():
    """Lightning's LightningModule has the loader methods (DataHooks'): a recorder of its members sees
    each call, where and how often Lightning 2.6 makes it. Before, trainmesh's base had none."""
    lightning = _recorded_fit(_framework("lightning"))
    assert "val_dataloader" in lightning
    assert _recorded_fit(tm) == lightning


@pytest.mark.parametrize("framework", ["lightning", "trainmesh"])
@pytest.mark.parametrize("base", ["LightningModule", "LightningDataModule"])
def test_an_undefined_loader_method_raises_lightnings_error(framework, base):
    """``super().val_dataloader()`` or a call of one never defined: Lightning's DataHooks' error."""
    pl = _framework(framework)
    owner = getattr(pl, base)()
    for name in _LOADERS:
        with pytest.raises(Exception, match=f"`{name}` must be implemented to be used with the Lightning Trainer") as e:
            getattr(owner, name)()
        assert type(e.value).__name__ in ("MisconfigurationException", "MisconfiguredValue")
        assert isinstance(e.value, pl.utilities.exceptions.MisconfigurationException)
