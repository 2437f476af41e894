"""One process, one device: the strategy every other one is checked against."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from typing import Any, ContextManager

import torch
from torch import nn

from trainmesh.accelerators import device_for
from trainmesh.checkpoint.distributed import is_distributed_checkpoint, load_distributed
from trainmesh.checkpoint.io import atomic_save, load_checkpoint_file
from trainmesh.launchers.base import ProcessInfo
from trainmesh.precision import Precision
from trainmesh.utilities.collections import move_to_device

_NO_SYNC_NEEDED = contextlib.nullcontext()
_REDUCE_OPS = ("mean", "sum", "max", "min")


class SingleDeviceStrategy:
    """Train on one device in this process.

    >>> strategy = SingleDeviceStrategy(torch.device("cpu"))
    >>> strategy.reduce(torch.tensor(3.0))
    tensor(3.)
    """

    name = "single"
    start_method = "in_process"
    processes_per_node = 1
    inference_mode_safe = True

    def __init__(self, device: torch.device | None = None) -> None:
        self._device = device or torch.device("cpu")
        self.precision = Precision("32-true", device_type=self._device.type)
        self._process = ProcessInfo()
        self._moves_batches = False
        self._module: nn.Module | None = None
        self._optimizers: list[torch.optim.Optimizer] = []

    def bind(self, *, device_type: str, devices: list[int], num_nodes: int, precision: Precision) -> SingleDeviceStrategy:
        """A copy of this strategy for the Runtime's device and precision."""
        if len(devices) * num_nodes != 1:
            raise ValueError(
                f"strategy='single' runs on one device, but devices={devices} and num_nodes={num_nodes} "
                "ask for more; use devices=1 or a multi-device strategy such as 'ddp'"
            )
        bound = copy.copy(self)
        bound._device = device_for(device_type, devices[0])
        bound.precision = precision
        # On CPU in full precision batches are already where they belong: skip the walk.
        bound._moves_batches = bound._device.type != "cpu" or precision.converts_input
        return bound

    @property
    def root_device(self) -> torch.device:
        return self._device

    @property
    def process(self) -> ProcessInfo:
        return self._process

    def setup_environment(self, process: ProcessInfo) -> None:
        assert process.world_size == 1, "a single-device strategy runs in one process"
        self._process = process
        if self._device.type == "cuda":
            torch.cuda.set_device(self._device)

    def module_init_context(self) -> ContextManager[Any]:
        """Where configure_model builds layers: here, on the real device (after setup_module)."""
        return contextlib.nullcontext()

    def setup_module(self, module: nn.Module) -> nn.Module:
        self._module = self.precision.convert_module(module.to(self._device))
        return self._module

    def setup_optimizers(self, optimizers: Sequence[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]:
        self._optimizers = list(optimizers)  # templates for loading a distributed checkpoint
        return list(optimizers)

    def process_dataloader(self, loader: Any, *, train: bool, seed: int) -> Any:
        return loader

    def batch_to_device(self, batch: Any) -> Any:
        if not self._moves_batches:
            return batch
        return self.precision.convert_input(move_to_device(batch, self._device, non_blocking=True))

    def run_step(self, module: nn.Module, hook: str, batch: Any, batch_idx: int, *extra: Any) -> Any:
        return getattr(module, hook)(batch, batch_idx, *extra)

    def reduce_step_output(self, output: Any) -> Any:
        return output

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def no_backward_sync(self, module: nn.Module) -> ContextManager[Any]:
        return _NO_SYNC_NEEDED

    def clip_gradients(self, module: nn.Module, max_norm: float, norm_type: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm, norm_type=norm_type)

    def clip_gradients_by_value(self, module: nn.Module, clip_value: float) -> None:
        torch.nn.utils.clip_grad_value_(module.parameters(), clip_value)

    def reduce(self, value: torch.Tensor, op: str = "mean") -> torch.Tensor:
        if op not in _REDUCE_OPS:
            raise ValueError(f"reduce op {op!r} is not known; use one of {_REDUCE_OPS}")
        return value

    def all_gather(self, value: Any) -> Any:
        from trainmesh.utilities.collections import apply_to_tensors

        return apply_to_tensors(value, lambda t: t.unsqueeze(0))

    def collect_predictions(self, outputs: list[Any]) -> list[Any]:
        return outputs

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def barrier(self, name: str | None = None) -> None:
        return None

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def module_state_dict(self, module: nn.Module, *, sharded: bool = False) -> dict[str, Any]:
        return module.state_dict()

    def load_module_state_dict(self, module: nn.Module, state: dict[str, Any], *, strict: bool = True) -> None:
        module.load_state_dict(state, strict=strict)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer, *, sharded: bool = False) -> dict[str, Any]:
        return optimizer.state_dict()

    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        optimizer.load_state_dict(state)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str) -> None:
        atomic_save(checkpoint, path)

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        if is_distributed_checkpoint(path):
            return load_distributed(path, self._module, self._optimizers)
        return load_checkpoint_file(path, map_location=self._device)

    def teardown(self, *, failed: bool = False) -> None:
        return None
