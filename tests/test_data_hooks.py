"""The data hooks a Module and a DataModule share, with Lightning's defaults: the batch hooks hand
the batch on, and transfer_batch_to_device is Lightning's move_data_to_device (tensors and objects
with a .to method, in nested containers)."""

import dataclasses

import torch

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
