"""The strategy protocol: how a model, its optimizers and its data are placed on devices.

The Trainer and the Runtime talk to strategies only through these methods; a behaviour that
differs between strategies is a method here, never an ``isinstance`` check in the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ContextManager, Protocol

import torch
from torch import nn

from trainmesh.launchers.base import ProcessInfo
from trainmesh.precision import Precision

ReduceOp = str  # "mean" | "sum" | "max" | "min"


class Strategy(Protocol):
    name: str
    precision: Precision
    start_method: str  # how processes start: "in_process", "elastic", "spawn", "fork"
    processes_per_node: int
    inference_mode_safe: bool  # may evaluation run under torch.inference_mode()

    def bind(self, *, device_type: str, devices: list[int], num_nodes: int, precision: Precision) -> Strategy:
        """A copy configured for the run's devices and precision (user instances carry options only)."""

    @property
    def root_device(self) -> torch.device: ...
    @property
    def process(self) -> ProcessInfo: ...

    def setup_environment(self, process: ProcessInfo) -> None:
        """Join the process group (if any) and pick this process's device."""
    def module_init_context(self) -> ContextManager[Any]:
        """Entered around ``configure_model``: the meta device for sharded strategies."""
    def setup_module(self, module: nn.Module) -> nn.Module:
        """Place, wrap or shard the module; returns what the loop calls."""
    def setup_optimizers(self, optimizers: Sequence[torch.optim.Optimizer]) -> list[torch.optim.Optimizer]: ...
    def process_dataloader(self, loader: Any, *, train: bool, seed: int) -> Any:
        """Add a distributed sampler or anything else the strategy needs in the loader.

        ``seed`` is the run's seed (``seed_everything``, 0 without it), the same in every
        process: a distributed sampler shuffles with it, so the shards make one permutation."""
    def batch_to_device(self, batch: Any) -> Any: ...
    def run_step(self, module: nn.Module, hook: str, batch: Any, batch_idx: int, *extra: Any) -> Any:
        """Call ``module.<hook>(batch, batch_idx, *extra)`` through whatever wrapper the strategy added."""
    def reduce_step_output(self, output: Any) -> Any:
        """What ``training_step`` gave, made into one step's output when the module has no
        ``training_step_end`` (dp/ddp2: the mean of the per-device losses)."""
    def backward(self, loss: torch.Tensor) -> None: ...
    def no_backward_sync(self, module: nn.Module) -> ContextManager[Any]:
        """Skip the gradient synchronisation for an accumulation micro-batch."""
    def clip_gradients(self, module: nn.Module, max_norm: float, norm_type: float) -> torch.Tensor: ...
    def clip_gradients_by_value(self, module: nn.Module, clip_value: float) -> None: ...
    def reduce(self, value: torch.Tensor, op: ReduceOp = "mean") -> torch.Tensor: ...
    def all_gather(self, value: Any) -> Any: ...
    def collect_predictions(self, outputs: list[Any]) -> list[Any]:
        """Every process's predictions, in dataset order."""
    def all_gather_object(self, obj: Any) -> list[Any]:
        """A picklable object from every process, in rank order."""
    def barrier(self, name: str | None = None) -> None: ...
    def broadcast(self, obj: Any, src: int = 0) -> Any: ...
    def module_state_dict(self, module: nn.Module, *, sharded: bool = False) -> dict[str, Any]:
        """The unwrapped module's weights: full tensors, or with ``sharded=True`` each rank's
        shards where the strategy shards (what a distributed checkpoint stores)."""
    def load_module_state_dict(self, module: nn.Module, state: dict[str, Any], *, strict: bool = True) -> None: ...
    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer, *, sharded: bool = False) -> dict[str, Any]: ...
    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None: ...
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str) -> None: ...
    def load_checkpoint(self, path: str) -> dict[str, Any]:
        """A file, or a distributed checkpoint directory resharded onto this run's layout."""
    def teardown(self, *, failed: bool = False) -> None: ...

