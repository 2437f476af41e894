"""DataParallel (``strategy="dp"``): one process; every batch is split across the devices.

On several GPUs each step replicates the module onto every device (torch's ``replicate`` /
``parallel_apply``), with DataParallel's semantics: state a step changes on a replica is lost.
On CPU, ``devices=k`` runs the k chunks one after another in this process with the same
arithmetic; it is not faster, but dp code can be written and tested on a laptop.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from trainmesh.accelerators import device_for
from trainmesh.precision import Precision
from trainmesh.strategies.data_parallel_ops import SplitForward, mean_loss, run_chunked_step
from trainmesh.strategies.single import SingleDeviceStrategy


class DataParallelStrategy:
    """The seeds' ``dp`` mode; ``training_step_end`` sees the outputs of all devices.

    >>> strategy = DataParallelStrategy().bind(device_type="cpu", devices=[0, 1], num_nodes=1,
    ...                                       precision=Precision("32", device_type="cpu"))
    >>> strategy.reduce_step_output({"loss": torch.tensor([1.0, 3.0])})["loss"]
    tensor(2.)
    """

    name = "dp"
    start_method = "in_process"
    processes_per_node = 1

    def __init__(self) -> None:
        self.chunk_devices = [torch.device("cpu")]
        # Everything about placement, checkpoints and (trivial) collectives is one device's.
        self._root = SingleDeviceStrategy()

    def bind(self, *, device_type: str, devices: list[int], num_nodes: int, precision: Precision) -> DataParallelStrategy:
        if num_nodes != 1:
            raise ValueError(
                f"strategy='dp' runs in one process on one machine, but num_nodes={num_nodes}; use "
                "'ddp2' (dp within a node, DDP across nodes) or 'ddp'"
            )
        bound = copy.copy(self)
        bound.chunk_devices = [device_for(device_type, index) for index in devices]
        bound._root = SingleDeviceStrategy().bind(device_type=device_type, devices=devices[:1], num_nodes=1,
                                                  precision=precision)
        return bound

    def __getattr__(self, name: str) -> Any:
        # Placement, precision, checkpoints and collectives: the root device's strategy.
        if name.startswith("__") or name == "_root":
            raise AttributeError(name)
        return getattr(self._root, name)

    def setup_module(self, module: nn.Module) -> nn.Module:
        # Calling the placed model splits the batch, so a user's own loop gets dp too.
        return SplitForward(self._root.setup_module(module), self.chunk_devices)

    def run_step(self, module: nn.Module, hook: str, batch: Any, batch_idx: int, *extra: Any) -> Any:
        inner = module.module if isinstance(module, SplitForward) else module
        return run_chunked_step(inner, hook, batch, (batch_idx, *extra), self.chunk_devices)

    def reduce_step_output(self, output: Any) -> Any:
        return mean_loss(output)
