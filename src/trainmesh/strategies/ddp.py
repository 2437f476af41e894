"""DistributedDataParallel: one process per device, each on its shard of the data, gradients
averaged by DDP's bucketed all-reduce during backward; and its two variants, ``ddp2`` (one
process per node, the node's batch split across its devices) and ``zero1`` (optimizer state
sharded across the processes)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainmesh.accelerators import device_for
from trainmesh.launchers.base import ProcessInfo
from trainmesh.strategies import checkpoint as checkpoints
from trainmesh.strategies.capabilities import REPLICATED, WORLD, MemoryModel, StrategyCapabilities
from trainmesh.strategies.compile import apply_compile, compile_setting, refuse_compile
from trainmesh.strategies.data_parallel import (
    StepCall,
    StepDispatcher,
    manual_refusal_on_replicas,
    mean_loss,
    run_chunked_step,
)
from trainmesh.strategies.ddp_manual_sync import ReducerSync, prepare_reducer, steps_each_optimizer, sync_in_hook
from trainmesh.strategies.distributed import DistributedStrategy
from trainmesh.strategies.lightning_arguments import check_hardware, ddp_arguments
from trainmesh.strategies.lockstep import Lockstep
from trainmesh.strategies.optimizer_shards import shard_optimizer_state
from trainmesh.strategies.protocol import Placement
from trainmesh.strategies.step import ManualSync, StepHooks, StepResult, call_hook, run_eval_step, run_train_step
from trainmesh.strategies.unused_parameters import unused_parameters_in_lightning_words


def apply_ddp(
    module: nn.Module, *, device: torch.device, chunk_devices: Sequence[torch.device] | None, options: dict[str, Any]
) -> nn.Module:
    """DDP around a step dispatcher around ``module`` (already on its device), or what the
    module's own ``configure_ddp`` returns (the seeds' "implement your own distributed
    training" hook). The dispatcher lets DDP's forward run ``training_step``, so DDP prepares
    its gradient all-reduce around the whole step."""
    dispatcher = StepDispatcher(module, chunk_devices)
    # A module spread over several devices (ddp2 on GPUs) must not name device_ids.
    device_ids = [device.index] if device.type == "cuda" and not chunk_devices else None
    configure_ddp = getattr(module, "configure_ddp", None)
    custom: nn.Module | None = configure_ddp(dispatcher, device_ids) if callable(configure_ddp) else None
    if custom is not None:
        return custom
    return DistributedDataParallel(dispatcher, device_ids=device_ids, **options)


class DDPStrategy(DistributedStrategy):
    """``Trainer(strategy=DDPStrategy(find_unused_parameters=True))`` for DDP's options.

    Args:
        start_method: how the processes start: ``"elastic"`` (the script re-run once per device by torch's elastic agent, as torchrun would), ``"spawn"``, ``"fork"`` or ``"forkserver"`` (default ``'elastic'``; Lightning's ``"popen"`` is ``"elastic"``).
        find_unused_parameters: DDP's option: allow parameters that take no gradient in a step (None: pytorch-lightning 1.9.5's True for a Trainer's run written for 1.x, Lightning 2.x's False for any other) (default ``None``).
        bucket_cap_mb: DDP's gradient bucket size in MiB (None: DDP's 25) (default ``None``).
        gradient_as_bucket_view: DDP's option: gradients are views into the all-reduce buckets (default ``False``).
        static_graph: DDP's option: the graph is the same every step (default ``False``).
        timeout: the process group's timeout (a ``timedelta``) (default ``datetime.timedelta(seconds=1800)``).
        process_group_backend: ``"gloo"`` or ``"nccl"`` (None: nccl on CUDA, gloo otherwise) (default ``None``).
        placement: the devices and precision (set by the Trainer/Runtime; leave it None) (default ``None``).
        **kwargs: Lightning 2.6's ``DDPStrategy`` arguments (``ddp_comm_hook``, ``ddp_comm_state``, ``ddp_comm_wrapper``, ``accelerator``, ``parallel_devices``, ...) and torch DDP's own options, each mapped or refused by ``strategies/lightning_arguments.py``.

    Examples:
        >>> DDPStrategy(bucket_cap_mb=50).init_arguments["bucket_cap_mb"]
        50
    """

    name = "ddp"
    # Manual optimization and compile are checked against plain torch and eager (tests/trainer/
    # test_manual_optimization.py, tests/strategies/test_compile.py).
    stated_capabilities = StrategyCapabilities(
        manual_optimization=True,
        compile=True,
        memory_model=REPLICATED,
        communication_model=True,
        keras_fit=True,
        lightning1_loops=True,  # tests/trainer/test_optimizer_idx.py, test_tbptt.py
        reseeds_each_run=True,
    )
    # Why compile is refused where ``capabilities.compile`` is False.
    compile_refusal = ""

    @property
    def capabilities(self) -> StrategyCapabilities:
        return self.stated_capabilities

    def __init__(
        self,
        *,
        start_method: str = "elastic",
        find_unused_parameters: bool | None = None,
        bucket_cap_mb: float | None = None,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
        timeout: timedelta = timedelta(minutes=30),
        process_group_backend: str | None = None,
        placement: Placement | None = None,
        **kwargs: Any,
    ) -> None:
        start_method = "elastic" if start_method == "popen" else start_method  # Lightning's name for the same start
        super().__init__(
            start_method=start_method, timeout=timeout, process_group_backend=process_group_backend, placement=placement
        )
        torch_options, self.comm_hook = ddp_arguments(type(self).__name__, kwargs)
        check_hardware(type(self).__name__, kwargs, placement)
        self.ddp_options = {
            "find_unused_parameters": find_unused_parameters,
            "bucket_cap_mb": bucket_cap_mb,
            "gradient_as_bucket_view": gradient_as_bucket_view,
            "static_graph": static_graph,
            **torch_options,  # Lightning passes its **kwargs to torch's DDP
        }
        self._lockstep: Lockstep | None = None  # during a ddp2 manual-optimization step
        if not self.capabilities.compile:
            refuse_compile(self.placement.compile, self.name, instead=self.compile_refusal)

    @functools.cached_property
    def chunk_devices(self) -> list[torch.device] | None:
        """The devices a process splits its batch across (ddp2); None: the process's own device."""
        return None

    def combine(self, output: Any) -> Any:
        """The step's output when the module has no ``training_step_end``."""
        return output

    _lightning1_run = False  # the Trainer's run follows pytorch-lightning 1.9.5 (follow_run_generation)

    def follow_run_generation(self, lightning1: bool) -> None:
        """Before the Trainer places a stage's module: whether its run is pytorch-lightning 1.x's (the module's
        hooks or the Trainer's 1.x spelling), whose DDP default ``find_unused_parameters`` is 1.9.5's True."""
        self._lightning1_run = lightning1

    def setup_module(self, module: nn.Module) -> nn.Module:
        module = self.precision.convert_module(module, device=self._device)
        if (setting := compile_setting(self.placement.compile, module)) is not None:
            # The inner module's forward, compiled in place, runs inside DDP's forward (the
            # dispatcher's training_step calls it), where dynamo sees the active DDP module and
            # splits its graph at the gradient buckets (DDPOptimizer), as for compile(DDP(m));
            # compiling DDP(dispatcher) instead would trace training_step, logging and all.
            apply_compile(module, options=setting)
        options = self.ddp_options
        if options["find_unused_parameters"] is None:
            # Not given: each Lightning generation's own default. pytorch-lightning 1.9.5's DDPStrategy and
            # DDPSpawnStrategy (every "ddp*" string but "_find_unused_parameters_false") set True in
            # pre_configure_ddp, so a 1.x run's module with a head its loss never reads trains there; 2.x
            # (and Fabric, of either generation): False.
            options = {**options, "find_unused_parameters": self._lightning1_run}
        if getattr(module, "automatic_optimization", True) is False or steps_each_optimizer(module):
            # Manual optimization (a GAN), or Lightning 1.x's training_step(batch, batch_idx, optimizer_idx):
            # each backward reaches only one optimizer's parameters, so the reducer must be told which
            # ones the loss leaves out (Lightning 1.x's default).
            options = {**options, "find_unused_parameters": True}
        ddp = apply_ddp(module, device=self._device, chunk_devices=self.chunk_devices, options=options)
        if self.comm_hook is not None and self._device.type == "cuda":
            # As Lightning's DDPStrategy._register_ddp_hooks: on CUDA only. On CPU Lightning trains
            # without the hook (plain gloo all-reduce), and torch refuses some hooks there (bf16).
            self.comm_hook.register(ddp)
        return ddp

    def setup_optimizers(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer]
    ) -> list[torch.optim.Optimizer]:
        return list(optimizers)

    def train_step(
        self, module: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool, hooks: StepHooks
    ) -> StepResult:
        with unused_parameters_in_lightning_words():
            if hooks.backward_scope is not None:
                return self._manual_train_step(_ddp(module), batch, batch_idx, hooks)
            step = StepCall("training_step", hooks.chunk_scope if self.chunk_devices else None, call=hooks.call)
            return run_train_step(
                lambda: module(step, batch, batch_idx),
                combine=self.combine,
                hooks=hooks,
                autocast=self.precision.autocast(),
                no_sync=None if sync_grads else _ddp(module).no_sync(),
            )

    def _manual_train_step(
        self, module: DistributedDataParallel, batch: Any, batch_idx: int, hooks: StepHooks
    ) -> StepResult:
        """A manual-optimization step: training_step runs its own backward calls and steps.

        DDP's forward runs with gradient sync off, so its post-forward prepares no reduction for
        the step's output (it would wait for gradients that the step's own backward calls already
        produced, and fail the next step); each ``manual_backward`` prepares the reducer for its
        own loss instead, as Lightning does, unless inside ``no_backward_sync``. ddp2's chunks run
        in lockstep (lockstep.py), backpropagating their losses' mean.
        """
        assert hooks.backward_scope is not None
        autocast = self.precision.autocast()
        if not self.chunk_devices:
            sync: ManualSync = ReducerSync(module)
            step = StepCall("training_step", sync_in_hook(module), call=hooks.call)
        else:
            inner = checkpoints.unwrap(module)
            self._lockstep = sync = Lockstep(
                inner, context=self.precision.autocast, prepare=functools.partial(prepare_reducer, module, always=True)
            )
            step = StepCall("training_step", hooks.chunk_scope, lockstep=sync, call=hooks.call)
        try:
            with module.no_sync(), hooks.backward_scope(sync):
                return run_train_step(
                    lambda: module(step, batch, batch_idx),
                    combine=self.combine,
                    hooks=hooks,
                    autocast=autocast,
                    no_sync=None,
                )
        finally:
            self._lockstep = None

    def no_backward_sync(self, module: nn.Module) -> AbstractContextManager[Any]:
        if self._lockstep is not None:  # inside a ddp2 chunk's training_step
            return self._lockstep.sync_off()
        return super().no_backward_sync(module)

    def eval_step(self, module: nn.Module, hook: str, batch: Any, batch_idx: int, *extra: Any, hooks: StepHooks) -> Any:
        # Around DDP (no gradient sync; predict's shares may differ by a batch), but evaluation first takes
        # rank 0's buffers as Lightning's, whose validation_step, test_step and predict_step go through DDP's
        # forward: it broadcasts them (BatchNorm's running statistics) once after training forwards, then
        # leaves the flag off (a test after a fit without validation: each rank tested with its own before).
        if hook in ("validation_step", "test_step", "predict_step") and isinstance(module, DistributedDataParallel):
            if module.will_sync_module_buffers():  # type: ignore[no-untyped-call]  # torch's own, unannotated
                module._sync_buffers()  # type: ignore[no-untyped-call]
                module.require_forward_param_sync = False
        inner = checkpoints.unwrap(module)
        chunk_devices = self.chunk_devices
        if chunk_devices:

            def forward() -> Any:
                return run_chunked_step(
                    inner, hook, batch, (batch_idx, *extra), chunk_devices, hooks.chunk_scope, call=hooks.call
                )
        else:

            def forward() -> Any:
                return call_hook(inner, hook, (batch, batch_idx, *extra), hooks.call)

        return run_eval_step(forward, hooks=hooks, autocast=self.precision.autocast())


class DDP2Strategy(DDPStrategy):
    """``ddp2``: one process per node instead of one per device. Each step splits the node's
    batch across its devices as DataParallel does (so ``*_step_end`` sees the node's whole
    batch), and DDP averages gradients across nodes.

    Args:
        start_method: how the processes start: ``"elastic"`` (the script re-run once per device by torch's elastic agent, as torchrun would), ``"spawn"``, ``"fork"`` or ``"forkserver"`` (default ``'elastic'``; Lightning's ``"popen"`` is ``"elastic"``).
        find_unused_parameters: DDP's option: allow parameters that take no gradient in a step (None: pytorch-lightning 1.9.5's True for a Trainer's run written for 1.x, Lightning 2.x's False for any other) (default ``None``).
        bucket_cap_mb: DDP's gradient bucket size in MiB (None: DDP's 25) (default ``None``).
        gradient_as_bucket_view: DDP's option: gradients are views into the all-reduce buckets (default ``False``).
        static_graph: DDP's option: the graph is the same every step (default ``False``).
        timeout: the process group's timeout (a ``timedelta``) (default ``datetime.timedelta(seconds=1800)``).
        process_group_backend: ``"gloo"`` or ``"nccl"`` (None: nccl on CUDA, gloo otherwise) (default ``None``).
        placement: the devices and precision (set by the Trainer/Runtime; leave it None) (default ``None``).

    Examples:
        >>> import trainmesh as tm
        >>> trainer = tm.Trainer(strategy="ddp2", devices=2, num_nodes=2)  # doctest: +SKIP
    """

    name = "ddp2"
    compile_refusal = "each step replicates the module across the node's devices, as dp does"

    @property
    def capabilities(self) -> StrategyCapabilities:
        # Manual optimization is checked against plain torch where a node's chunks run in turn
        # (tests/trainer/test_manual_optimization_split.py); on a node's GPUs, see dp.py.
        refusal = manual_refusal_on_replicas(self.chunk_devices or [], "ddp2")
        return StrategyCapabilities(
            manual_optimization=not refusal,
            manual_optimization_refusal=refusal,
            memory_model=REPLICATED,
            reseeds_each_run=True,
        )

    @property
    def processes_per_node(self) -> int:
        return 1

    def device_index(self, process: ProcessInfo) -> int:
        return self.placement.devices[0]

    @functools.cached_property
    def chunk_devices(self) -> list[torch.device] | None:
        return [device_for(self.placement.device_type, index) for index in self.placement.devices]

    def combine(self, output: Any) -> Any:
        return mean_loss(output)  # without training_step_end, the mean over the node's chunks


class ZeRO1Strategy(DDPStrategy):
    """``zero1``: DDP, with each rank keeping only its shard of the optimizer state (ZeRO stage 1).

    Args:
        start_method: how the processes start: ``"elastic"`` (the script re-run once per device by torch's elastic agent, as torchrun would), ``"spawn"``, ``"fork"`` or ``"forkserver"`` (default ``'elastic'``; Lightning's ``"popen"`` is ``"elastic"``).
        find_unused_parameters: DDP's option: allow parameters that take no gradient in a step (None: pytorch-lightning 1.9.5's True for a Trainer's run written for 1.x, Lightning 2.x's False for any other) (default ``None``).
        bucket_cap_mb: DDP's gradient bucket size in MiB (None: DDP's 25) (default ``None``).
        gradient_as_bucket_view: DDP's option: gradients are views into the all-reduce buckets (default ``False``).
        static_graph: DDP's option: the graph is the same every step (default ``False``).
        timeout: the process group's timeout (a ``timedelta``) (default ``datetime.timedelta(seconds=1800)``).
        process_group_backend: ``"gloo"`` or ``"nccl"`` (None: nccl on CUDA, gloo otherwise) (default ``None``).
        placement: the devices and precision (set by the Trainer/Runtime; leave it None) (default ``None``).

    Examples:
        >>> import trainmesh as tm
        >>> trainer = tm.Trainer(strategy="zero1", devices=2)  # doctest: +SKIP
    """

    name = "zero1"
    # Manual optimization is checked against plain torch (tests/trainer/test_manual_optimization_strategies.py).
    stated_capabilities = StrategyCapabilities(
        manual_optimization=True,
        memory_model=MemoryModel(optimizer_state=WORLD),
        communication_model=True,
        reseeds_each_run=True,
        keras_fit=True,  # keras/zero.py splits the Keras optimizer's state the same way
    )
    compile_refusal = "no compiled zero1 run is checked against eager yet"

    def setup_optimizers(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer]
    ) -> list[torch.optim.Optimizer]:
        return [shard_optimizer_state(optimizer) for optimizer in optimizers]

    def state_dict(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, sharded: bool
    ) -> dict[str, Any]:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        state = checkpoints.plain_state_dict(module, [])
        state["optim"] = []
        for optimizer in optimizers:
            if isinstance(optimizer, ZeroRedundancyOptimizer):
                # Every rank sends its shard to rank 0, which holds the whole state for the file.
                optimizer.consolidate_state_dict(to=0)
                state["optim"].append(optimizer.state_dict() if dist.get_rank() == 0 else {})
            else:
                state["optim"].append(optimizer.state_dict())
        return state


def _ddp(module: nn.Module) -> DistributedDataParallel:
    """The module ``setup_module`` returned: DDP, or what the module's ``configure_ddp`` built, which
    has DDP's interface (``no_sync``, the reducer) by the hook's contract."""
    return cast(DistributedDataParallel, module)
