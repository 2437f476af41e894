"""Single-machine model parallel: one process, the model's parts on different
devices, activations moved from one to the next.

The parts are cut as a pipeline's are (``pipeline.split_parts``: balanced by parameter count, or
at ``split_points``); part ``i`` of the cut lives on the ``i``-th device. Each part moves what it
receives onto its own device before it runs, and the model's output comes back to the first
device (where the batch is), so the module's code holds no ``.to()`` call and may run its parts
in any order. Only one device works at a time: this spreads memory, not time (a pipeline
schedule, ``ModelParallelStrategy(pp=...)``, overlaps the stages).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainmesh.accelerators import device_for
from trainmesh.strategies.capabilities import StrategyCapabilities
from trainmesh.strategies.compile import refuse_compile
from trainmesh.strategies.mesh import ParallelDims, ParallelMesh
from trainmesh.strategies.pipeline_cut import split_parts
from trainmesh.strategies.protocol import Placement
from trainmesh.strategies.single import SingleDeviceStrategy
from trainmesh.utilities.collections import move_to_device
from trainmesh.utilities.placement import place_tensors


class LayersOnDevicesStrategy(SingleDeviceStrategy):
    """``Trainer(accelerator="gpu", devices=2, strategy="layers_on_devices")``: one process, the
    model's layers spread over the devices (``split_points=["seq2"]`` to choose the cut).

    Args:
        split_points: part names to cut before (None: balanced by parameter count) (default ``None``).
        placement: the devices and precision (set by the Trainer/Runtime; leave it None) (default ``None``).

    Examples:
        >>> strategy = LayersOnDevicesStrategy(split_points=["seq2"])
        >>> # Trainer(accelerator="gpu", devices=2, strategy=strategy)
    """

    name = "layers_on_devices"
    # No memory model: each device holds the layers it was given. Manual optimization is checked
    # against plain torch (tests/trainer/test_manual_optimization_split.py).
    capabilities = StrategyCapabilities(manual_optimization=True)

    def __init__(self, *, split_points: list[str] | None = None, placement: Placement | None = None) -> None:
        self.placement = placement or Placement()
        if self.placement.num_nodes != 1:
            raise ValueError(
                f"strategy={self.name!r} runs in one process on one machine; num_nodes="
                f"{self.placement.num_nodes} needs ModelParallelStrategy(pp=..., pp_within_node=True)"
            )
        refuse_compile(self.placement.compile, self.name, instead="a graph would span the devices")
        self.split_points = split_points
        self.precision = self.placement.precision
        self.devices = [device_for(self.placement.device_type, index) for index in self.placement.devices]
        self._device = self.devices[0]
        self._mesh = ParallelMesh(ParallelDims().resolved(1))

    def setup_environment(self, process: Any) -> None:
        assert process.world_size == 1, "a one-process strategy runs in one process"
        if self._device.type == "cuda":
            torch.cuda.set_device(self._device)

    def setup_module(self, module: nn.Module) -> nn.Module:
        cut = split_parts(module, len(self.devices), self.split_points)
        # What no part holds (buffers of the module itself) stays with the batch.
        self.precision.convert_module(module, device=self._device)
        for parts, device in zip(cut, self.devices):
            for name in parts:
                part = place_tensors(module.get_submodule(name), device=device)
                part.register_forward_pre_hook(_inputs_to(device), with_kwargs=True)
        module.register_forward_hook(_output_to(self._device))
        return module


def _inputs_to(device: torch.device) -> Any:
    def move(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return move_to_device(args, device), move_to_device(kwargs, device)

    return move


def _output_to(device: torch.device) -> Any:
    def move(_: nn.Module, args: Any, output: Any) -> Any:
        return move_to_device(output, device)

    return move
