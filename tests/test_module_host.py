"""The answers of a LightningModule's host (trainmesh.module_host): under a Fabric, as Lightning's beside Fabric 2.6.

The Trainer's answers are every Trainer test's; here, what only the Fabric host answers: ``clip_gradients``
(Lightning's calls ``fabric.clip_gradients``), ``all_gather`` (the Fabric's strategy) and the ``fabric``
setter (a weak proxy, the Lightning submodules too, ``self.trainer`` then reading the Fabric), each on one
process beside Lightning's LightningModule under Lightning Fabric 2.6.
"""

from __future__ import annotations

import weakref

import pytest
import torch

pytest.importorskip("lightning.fabric")


def _probe(framework: str) -> dict:
    if framework == "lightning":
        from lightning.fabric import Fabric
        from lightning.pytorch import LightningModule
    else:
        from trainmesh import Fabric, LightningModule

    class Child(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)
            self.child = Child()

    fabric = Fabric(accelerator="cpu", devices=1)
    torch.manual_seed(0)
    found: dict = {}
    model = Model()
    model.fabric = fabric  # Lightning's setter
    found["proxied"] = [isinstance(m._fabric, weakref.ProxyTypes) for m in (model, model.child)]
    found["world_size"] = model.trainer.world_size
    model.fabric = None
    found["detached"] = (model._fabric, model.child._fabric)

    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    fabric.backward(model.module.layer(torch.randn(3, 4)).sum())
    with pytest.raises(ValueError) as unset:  # Fabric's: neither clip_val nor max_norm
        model.module.clip_gradients(optimizer)
    found["unset"] = str(unset.value)
    found["norm"] = model.module.clip_gradients(optimizer, gradient_clip_val=0.5)
    found["after_norm"] = model.module.layer.weight.grad.clone()
    model.module.clip_gradients(optimizer, gradient_clip_val=0.01, gradient_clip_algorithm="value")
    found["after_value"] = model.module.layer.weight.grad.clone()
    found["gathered"] = model.module.all_gather({"a": torch.tensor([1.0, 2.0]), "b": 3})
    return found


def test_a_module_set_up_by_fabric_clips_gathers_and_takes_a_fabric_as_lightnings():
    ours, theirs = _probe("trainmesh"), _probe("lightning")
    assert ours["proxied"] == theirs["proxied"] == [True, True]
    assert ours["world_size"] == theirs["world_size"] == 1
    assert ours["detached"] == theirs["detached"] == (None, None)
    assert ours["unset"] == theirs["unset"]
    assert ours["norm"] is theirs["norm"] is None
    assert torch.equal(ours["after_norm"], theirs["after_norm"])
    assert torch.equal(ours["after_value"], theirs["after_value"])
    assert ours["gathered"].keys() == theirs["gathered"].keys()
    assert all(torch.equal(ours["gathered"][k], theirs["gathered"][k]) for k in ("a", "b"))
