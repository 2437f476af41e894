"""One process, one device: the strategy every other one is checked against."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from trainmesh.accelerators import device_for
from trainmesh.checkpoint.keys import CheckpointKeys
from trainmesh.checkpoint.writers import SYNCHRONOUS, CheckpointWriter
from trainmesh.launchers.base import ProcessInfo, ProcessPlan
from trainmesh.strategies import checkpoint as checkpoints
from trainmesh.strategies import lightning_arguments
from trainmesh.strategies.arguments import new_keeping_arguments, rebuilt
from trainmesh.strategies.capabilities import REPLICATED, StrategyCapabilities
from trainmesh.strategies.compile import apply_compile, compile_setting
from trainmesh.strategies.gradients import clip_gradients_locally
from trainmesh.strategies.lightning_face import LightningStrategyFace
from trainmesh.strategies.mesh import ParallelDims, ParallelMesh
from trainmesh.strategies.protocol import Placement
from trainmesh.strategies.step import (
    StepHooks,
    StepModule,
    StepResult,
    call_hook,
    run_eval_step,
    run_train_step,
    whole_output,
)

_NO_SYNC_NEEDED = contextlib.nullcontext()


class SingleDeviceStrategy(LightningStrategyFace):
    """Train on one device in this process.

    Args:
        device: Lightning's ``SingleDeviceStrategy(device=...)`` (``"cpu"``, ``"cuda:0"``, a ``torch.device``): checked against the Trainer's device, which is the one used (default ``None``: the Trainer's).
        placement: the devices and precision (set by the Trainer/Runtime; leave it None) (default ``None``).
        **kwargs: Lightning's ``accelerator`` (checked against the Trainer's), ``checkpoint_io`` and ``precision_plugin`` (refused: pass them to the Trainer).

    Examples:
        >>> strategy = SingleDeviceStrategy(placement=Placement("cpu", (0,)))
        >>> strategy.root_device
        device(type='cpu', index=0)
    """

    launcher = None  # Lightning's single-device strategy starts no processes (programs test it for None)

    name = "single"
    start_method = "in_process"
    processes_per_node = 1
    # Manual optimization is checked against plain torch (tests/trainer/test_manual_optimization*.py).
    capabilities = StrategyCapabilities(
        manual_optimization=True,
        compile=True,
        memory_model=REPLICATED,
        keras_fit=True,
        lightning1_loops=True,
        lightning1_optimizer_loop=True,  # tests/loops/test_optimizer_loop.py
    )

    def __new__(cls, device: Any = None, **kwargs: Any) -> SingleDeviceStrategy:
        # Lightning's programs write SingleDeviceStrategy("cuda:0"): the device is its one positional
        # argument. Named here (not *args) so that LightningCLI's parser sees it, as in Lightning's
        # config (``init_args: {device: cpu}``).
        return new_keeping_arguments(cls, (), kwargs if device is None else {"device": device, **kwargs})

    def __init__(self, device: Any = None, *, placement: Placement | None = None, **kwargs: Any) -> None:
        lightning_arguments.refuse_unknown(
            "SingleDeviceStrategy", kwargs, ("accelerator", "checkpoint_io", "precision_plugin")
        )
        lightning_arguments.check_hardware("SingleDeviceStrategy", kwargs, placement)
        if placement is not None and device is not None:
            lightning_arguments.check_device(device, placement)
        self.placement = placement or Placement()
        if len(self.placement.devices) * self.placement.num_nodes != 1:
            raise ValueError(
                f"strategy={self.name!r} runs in one process, but devices={list(self.placement.devices)} and "
                f"num_nodes={self.placement.num_nodes} ask for more; use devices=1 or a multi-device strategy such as 'ddp'"
            )
        self.precision = self.placement.precision
        self._device = device_for(self.placement.device_type, self.placement.devices[0])
        self._mesh = ParallelMesh(ParallelDims().resolved(1))
        self._placed: nn.Module | None = None  # what training_step calls (Lightning's strategy.model)

    def with_placement(self, placement: Placement) -> SingleDeviceStrategy:
        return rebuilt(self, placement)

    @property
    def worker_environment(self) -> dict[str, str]:
        return {}

    @property
    def processes(self) -> ProcessPlan:
        return ProcessPlan(self.start_method, self.processes_per_node, self.worker_environment)

    @property
    def root_device(self) -> torch.device:
        return self._device

    @property
    def mesh(self) -> ParallelMesh:
        return self._mesh

    @property
    def metrics_source(self) -> Any:
        return None  # every rank computes its loss and logs

    def setup_environment(self, process: ProcessInfo) -> None:
        assert process.world_size == 1, "a one-process strategy runs in one process"
        if self._device.type == "cuda":
            torch.cuda.set_device(self._device)

    def module_init_context(self) -> AbstractContextManager[Any]:
        """Where configure_model builds layers: here, on the real device (after setup_module)."""
        return contextlib.nullcontext()

    def setup_module(self, module: nn.Module) -> nn.Module:
        module = self.precision.convert_module(module, device=self._device)
        if (setting := compile_setting(self.placement.compile, module)) is not None:
            apply_compile(module, options=setting)  # in place: the module stays the user's
        self._placed = module
        return module

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """Lightning's ``Strategy.training_step``: the placed module's ``training_step`` (in the precision's
        autocast), which a 1.x ``OptimizerLoop`` subclass calls itself (yielding_training_step.py)."""
        if self._placed is None:
            raise RuntimeError("strategy.training_step runs once fit has placed the module")
        with self.precision.autocast():
            return self._placed.training_step(*args, **kwargs)  # type: ignore[operator]

    def post_training_step(self) -> None:
        """Lightning 1.x's hook after ``training_step``: nothing to do on one device."""

    def setup_optimizers(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer]
    ) -> list[torch.optim.Optimizer]:
        return list(optimizers)

    def process_dataloader(
        self,
        loader: Any,
        *,
        train: bool | None = None,
        seed: int = 0,
        shuffle: bool | None = None,
        predict: bool = False,
        wrap_samplers: bool = False,
    ) -> Any:
        if train is None:  # Lightning's one-argument call (a program's subclass's super()): processed already
            return loader
        return loader

    def train_step(
        self, module: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool, hooks: StepHooks
    ) -> StepResult:
        # A partial, not a lambda through typing.cast: two Python calls fewer on every step.
        step_module: StepModule = module  # type: ignore[assignment]  # the user's Module
        call = hooks.call
        return run_train_step(
            functools.partial(step_module.training_step, batch, batch_idx)
            if call is None
            else functools.partial(call, step_module.training_step, batch, batch_idx),
            combine=whole_output,
            hooks=hooks,
            autocast=self.precision.autocast(),
            no_sync=None,
        )

    def eval_step(self, module: nn.Module, hook: str, batch: Any, batch_idx: int, *extra: Any, hooks: StepHooks) -> Any:
        return run_eval_step(
            lambda: call_hook(module, hook, (batch, batch_idx, *extra), hooks.call),
            hooks=hooks,
            autocast=self.precision.autocast(),
        )

    def no_backward_sync(self, module: nn.Module) -> AbstractContextManager[Any]:
        return _NO_SYNC_NEEDED

    def clip_gradients(
        self,
        module: nn.Module,
        parameters: Sequence[torch.Tensor],
        *,
        max_norm: float | None,
        clip_value: float | None,
        norm_type: float,
    ) -> torch.Tensor | None:
        return clip_gradients_locally(parameters, max_norm=max_norm, clip_value=clip_value, norm_type=norm_type)

    def state_dict(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, sharded: bool
    ) -> dict[str, Any]:
        # The placed module is the user's own (dp's splitter hands over the inner module's state).
        return checkpoints.plain_state_dict(module, optimizers, unwrapped=False)

    def load_state_dict(
        self,
        module: nn.Module | None,
        optimizers: Sequence[torch.optim.Optimizer],
        state: dict[str, Any],
        *,
        strict: bool = True,
    ) -> None:
        checkpoints.load_plain_state_dict(module, optimizers, state, strict=strict, unwrapped=False)

    def save_checkpoint(
        self,
        checkpoint: dict[str, Any],
        path: str,
        *,
        sharded: CheckpointKeys | None,
        writer: CheckpointWriter = SYNCHRONOUS,
    ) -> None:
        writer.write_file(checkpoint, path)

    def load_checkpoint(
        self, path: str, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, keys: CheckpointKeys
    ) -> dict[str, Any]:
        return checkpoints.load(path, module, optimizers, keys=keys, map_location=self._device)

    def share_state_with_peers(self, key: str, state: Callable[[], Any], load: Callable[[Any], None]) -> None:
        """No replica here recovers from a peer (that is fault_tolerance's strategy)."""

    def teardown(self, *, failed: bool = False) -> None:
        return None
