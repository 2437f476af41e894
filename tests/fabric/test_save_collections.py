"""``fabric.save`` of a state whose values are collections, beside Lightning Fabric 2.6 on one process.

Fabric unwraps its set-up objects anywhere in the state (its ``apply_to_collection`` walk) and rebuilds
each collection as its own class: a LightningModule's ``hparams`` (an ``AttributeDict``) is saved as
one, a set-up optimizer inside a list is the torch optimizer. trainmesh saved ``hparams`` as a plain
``dict`` and failed to pickle a nested set-up optimizer (a program of a user's, saving
``"hparams": model.hparams`` beside its model, read back another type).
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning.fabric")

Pair = collections.namedtuple("Pair", "a b")


def _saved(framework: str, path: Path) -> list:
    if framework == "lightning":
        from lightning.fabric import Fabric
        from lightning.fabric.utilities.data import AttributeDict
    else:
        from trainmesh import Fabric
        from trainmesh.fabric.utilities.data import AttributeDict
    fabric = Fabric(accelerator="cpu", devices=1)
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    nested = {"optimizers": [optimizer], "pair": Pair(1, (2, 3)), "modules": {"m": model}}
    fabric.save(path, {"model": model, "hparams": AttributeDict(lr=0.1), "nested": nested})
    saved = torch.load(path, weights_only=False)
    inner = saved["nested"]
    return [
        type(saved["hparams"]).__name__,
        dict(saved["hparams"]),
        type(inner["optimizers"][0]).__qualname__,
        inner["pair"],
        type(inner["pair"]).__name__,
        type(inner["modules"]["m"]).__qualname__,
        {k: v.tolist() for k, v in saved["model"].items()},
    ]


def test_collections_in_the_state_are_saved_as_lightning_fabric_saves_them(tmp_path):
    theirs = _saved("lightning", tmp_path / "l.ckpt")
    assert theirs[0] == "AttributeDict" and theirs[2] == "SGD"
    assert _saved("trainmesh", tmp_path / "t.ckpt") == theirs
