"""A precision plugin of the program's own class under trainmesh.Fabric beside Lightning Fabric 2.6 (one process).

Fabric calls the hooks the plugin's class defines where it always calls them (setup, init_module, the
forward, backward, clip_gradients, the optimizer's step); a plugin that converts the module to float64,
doubles the inputs, halves the loss and records every call trains the same weights with the same calls
under both. Before, trainmesh took such a plugin for its ``precision`` name only: none of its methods ran.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

pytest.importorskip("lightning.fabric")


def _train(framework: str, tmp_path) -> tuple[list, torch.Tensor]:
    if framework == "lightning":
        from lightning.fabric import Fabric
        from lightning.fabric.plugins import Precision
    else:
        from trainmesh import Fabric
        from trainmesh.fabric.plugins import Precision
    calls: list = []

    class ScaledPrecision(Precision):
        precision = "32-true"

        def convert_module(self, module):
            calls.append("convert_module")
            return super().convert_module(module).double()

        def module_init_context(self):
            calls.append("module_init_context")
            return contextlib.nullcontext()

        @contextlib.contextmanager
        def forward_context(self):
            calls.append("forward_context")
            with super().forward_context():
                yield

        def convert_input(self, data):
            calls.append("convert_input")
            args, kwargs = super().convert_input(data)
            return tuple(2 * t.double() for t in args), kwargs

        def convert_output(self, data):
            calls.append(("convert_output", data.dtype))
            return data.float()

        def pre_backward(self, tensor, module):
            calls.append(("pre_backward", module))

        def backward(self, tensor, model, *args, **kwargs):
            calls.append("backward")
            super().backward(0.5 * tensor, model, *args, **kwargs)

        def post_backward(self, tensor, module):
            calls.append("post_backward")

        def optimizer_step(self, optimizer, **kwargs):
            calls.append(("optimizer_step", type(optimizer).__name__))
            return super().optimizer_step(optimizer, **kwargs)

        def unscale_gradients(self, optimizer):
            calls.append("unscale_gradients")

        def main_params(self, optimizer):
            calls.append("main_params")
            return list(super().main_params(optimizer))[:1]  # only the weight is clipped

    fabric = Fabric(accelerator="cpu", devices=1, plugins=ScaledPrecision())
    torch.manual_seed(3)
    with fabric.init_module():
        model = torch.nn.Linear(4, 2)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(6, 4)
    for _ in range(2):
        fabric.backward(model(x).pow(2).mean())
        fabric.clip_gradients(model, optimizer, max_norm=0.05)
        optimizer.step()
        optimizer.zero_grad()
    return calls, torch.cat([p.detach().flatten() for p in model.parameters()])


def test_the_hooks_of_a_precision_plugin_of_the_program_s_own_class_are_called_as_lightning_fabric_calls_them(
    tmp_path,
):
    their_calls, theirs = _train("lightning", tmp_path)
    our_calls, ours = _train("trainmesh", tmp_path)
    assert our_calls == their_calls
    assert ours.dtype == theirs.dtype == torch.float64
    assert torch.equal(ours, theirs)
