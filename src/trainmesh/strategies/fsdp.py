"""Sharded data parallel on FSDP2 (``fully_shard``): ``sharded`` (ZeRO-2), ``fsdp`` (ZeRO-3)
and ``hsdp`` (sharded within a group, replicated across groups, on a 2-D mesh).

Process groups, data sharding and collectives are every multi-process strategy's
(``distributed.py``); what differs is how the module and its optimizer state are split.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any, cast

import torch
from torch import nn

from trainmesh.checkpoint.keys import CheckpointKeys
from trainmesh.checkpoint.writers import SYNCHRONOUS, CheckpointWriter
from trainmesh.plugins.precision import FSDPPrecision  # noqa: F401  # Lightning's module path holds it too
from trainmesh.precision import Precision
from trainmesh.strategies import checkpoint as checkpoints
from trainmesh.strategies import lightning_arguments
from trainmesh.strategies.capabilities import SHARD_GROUP, WORLD, MemoryModel, StrategyCapabilities
from trainmesh.strategies.compile import apply_compile, compile_setting, innermost, refuse_compile
from trainmesh.strategies.data_parallel import StepCall, StepDispatcher
from trainmesh.strategies.distributed import DistributedStrategy
from trainmesh.strategies.gradients import fsdp_gradient_sync_off
from trainmesh.strategies.materialize import materialize
from trainmesh.strategies.mesh import ParallelDims
from trainmesh.strategies.protocol import Placement
from trainmesh.strategies.shard_units import shard_units
from trainmesh.strategies.step import StepHooks, StepResult, run_eval_step, run_train_step, whole_output
from trainmesh.utilities.host_memory import HUGE_PAGES_VARIABLE, huge_pages_in_effect, release_large_frees
from trainmesh.utilities.rank_zero import rank_zero_info, rank_zero_warn


def apply_fsdp(
    module: nn.Module,
    mesh: Any,
    units: list[nn.Module],
    *,
    reshard_after_forward: bool,
    mp_policy: Any = None,
    offload_policy: Any = None,
    step_root: bool = True,
) -> nn.Module:
    """fully_shard each unit, then a root around the module (which holds what no unit took).

    The root is a ``StepDispatcher``: the loop calls ``training_step`` through its forward, so
    FSDP's root hooks run once around the whole step, and the module's own ``forward`` (which
    ``training_step`` calls) adds no second post-forward that would reshard what
    ``reshard_after_forward=False`` means to keep whole until backward. ``step_root=False``:
    the module itself is the root (a pipeline stage, which the schedule calls).
    """
    from torch.distributed.fsdp import fully_shard

    options: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard_after_forward}
    if mp_policy is not None:
        options["mp_policy"] = mp_policy
    if offload_policy is not None:
        options["offload_policy"] = offload_policy
    for unit in units:
        fully_shard(unit, **options)
    # fully_shard returns the module it was given (its class now also an FSDPModule).
    return cast(nn.Module, fully_shard(StepDispatcher(module) if step_root else module, **options))


def apply_replicate(module: nn.Module, mesh: Any, *, mp_policy: Any = None, step_root: bool = True) -> nn.Module:
    """FSDP2's ``replicate`` (every rank the whole module, gradients all-reduced), with the same
    root and mixed precision as ``apply_fsdp``."""
    from torch.distributed._composable.replicate_with_fsdp import replicate

    root = StepDispatcher(module) if step_root else module
    if mp_policy is None:
        return cast(nn.Module, replicate(root, mesh=mesh))
    return cast(nn.Module, replicate(root, mesh=mesh, mp_policy=mp_policy))


def mixed_precision_policy(precision: Precision) -> Any:
    """FSDP2's policy for ``precision``: None for full precision or a "-true" one (the parameters
    themselves are in the compute dtype, and gradients are reduced in it, as ddp reduces them);
    for a mixed one, fp32 parameters computed in the low precision, gradients reduced in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if not precision.mixed:
        return None
    return MixedPrecisionPolicy(param_dtype=precision.compute_dtype, reduce_dtype=torch.float32)


def refuse_keras(module: nn.Module, strategy: str) -> None:
    """Keras layers cannot be sharded by FSDP2: say so before training, not after."""
    keras_layer = next((m for m in module.modules() if type(m).__module__.split(".")[0] == "keras"), None)
    if keras_layer is not None:
        raise ValueError(
            f"strategy={strategy!r} cannot train {type(keras_layer).__name__}, a Keras model: Keras layers "
            "read their weights through their own Variable objects, while FSDP2 shards a model by "
            "swapping the torch module's parameters, which the Keras layers never read, so the model "
            "would silently train nothing. Use strategy='ddp' (or 'zero1', which shards the optimizer "
            "state) for Keras models"
        )


def apply_activation_checkpointing(module: nn.Module, classes: Sequence[type[nn.Module]]) -> None:
    """Recompute these blocks' activations in backward instead of keeping them."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing as apply

    apply(module, check_fn=lambda m: isinstance(m, tuple(classes)))


_MEMORY_MODELS = {
    "fsdp": MemoryModel(WORLD, WORLD, WORLD),
    # At the optimizer step parameters are sharded too (post-backward reshards them); they are
    # whole from forward to backward.
    "sharded": MemoryModel(WORLD, WORLD, WORLD, gathered_for_backward=True),
    "hsdp": MemoryModel(SHARD_GROUP, SHARD_GROUP, SHARD_GROUP),
}


class FSDPStrategy(DistributedStrategy):
    """``Trainer(strategy=FSDPStrategy(wrap=[Block], cpu_offload=True))``.

    ``wrap`` (module classes) or ``min_num_params`` choose the shard units; without either,
    each repeated block (transformer layers: the members of a ``ModuleList``/``Sequential`` of
    one class), plus large modules outside them such as embeddings and the output head, wherever
    they are in the model (``strategies/shard_units.py`` says how).
    ``reshard_after_forward=False`` keeps parameters whole between forward and backward
    (``sharded``, ZeRO-2). ``shard_size`` (or ``hybrid=True``: a node's processes) makes a 2-D
    mesh: shard within groups of that many processes, replicate across groups (``hsdp``).

    ``release_host_memory``, where shards live in host memory (CPU, or ``cpu_offload``): whether
    freed tensors of 4 MiB and more go back to the system at once (``utilities/host_memory.py``).
    It keeps the peak low (per process at 2 processes: 0.52x ddp's on a 117M-parameter transformer,
    0.60x on a 55M one; 0.72x and 1.25x without it) but maps fresh memory for those tensors every
    step, which is cheap only on transparent huge pages (CPU per step against hand-written FSDP2:
    0.73x at 117M, 1.20x at 55M; without huge pages 1.40x and 2.19x; ``benchmarks/fsdp_overhead.py``).
    ``None`` (the default) releases where torch's huge pages are in effect (``THP_MEM_ALLOC_ENABLE=1``
    from the process's start: trainmesh's launchers set it for the workers they start; under
    torchrun, set it in the environment), and otherwise keeps glibc's defaults, step time first
    (0.94x hand-written FSDP2's CPU at both sizes); ``True`` releases anyway (the lowest peak at
    any speed); ``False`` never (on a 55M-parameter model with huge pages, the 1.20x back for
    twice the peak).

    Args:
        wrap: module classes (or names) that become shard units (None: chosen automatically) (default ``None``).
        min_num_params: make a shard unit of any module with at least this many parameters (default ``None``).
        reshard_after_forward: free gathered parameters after forward (False: ZeRO-2, the ``sharded`` strategy) (default ``True``).
        cpu_offload: keep parameters and optimizer state on the CPU (default ``False``).
        activation_checkpointing: module classes whose activations are recomputed in backward (default ``None``).
        shard_size: shard within groups of this many processes, replicate across them (HSDP) (default ``None``).
        hybrid: HSDP with the shard group a node (default ``False``).
        start_method: how the processes start: ``"elastic"`` (the script re-run once per device by torch's elastic agent, as torchrun would), ``"spawn"``, ``"fork"`` or ``"forkserver"`` (default ``'elastic'``).
        timeout: the process group's timeout (a ``timedelta``) (default ``datetime.timedelta(seconds=1800)``).
        process_group_backend: ``"gloo"`` or ``"nccl"`` (None: nccl on CUDA, gloo otherwise) (default ``None``).
        placement: the devices and precision (set by the Trainer/Runtime; leave it None) (default ``None``).
        release_host_memory: on CPU, give freed gathered tensors back to the system (None: where huge pages are in effect) (default ``None``).
        **kwargs: Lightning 2.6's ``FSDPStrategy`` arguments (``auto_wrap_policy``, ``activation_checkpointing_policy``, ``sharding_strategy``, ``state_dict_type``, ``device_mesh``, ``mixed_precision``, ``accelerator``, ...), each mapped or refused by ``strategies/lightning_arguments.py``.

    Examples:
        >>> strategy = FSDPStrategy(shard_size=2, release_host_memory=False)
        >>> # Trainer(strategy=strategy, devices=4): HSDP, sharded in pairs
    """

    def __init__(
        self,
        *,
        wrap: Sequence[type[nn.Module]] | None = None,
        min_num_params: int | None = None,
        reshard_after_forward: bool = True,
        cpu_offload: bool = False,
        activation_checkpointing: Sequence[type[nn.Module]] | None = None,
        shard_size: int | None = None,
        hybrid: bool = False,
        start_method: str = "elastic",
        timeout: timedelta = timedelta(minutes=30),
        process_group_backend: str | None = None,
        placement: Placement | None = None,
        release_host_memory: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            start_method=start_method, timeout=timeout, process_group_backend=process_group_backend, placement=placement
        )
        lightning = lightning_arguments.fsdp_arguments(type(self).__name__, kwargs)
        lightning_arguments.refuse_twice(type(self).__name__, self.init_arguments, lightning)  # type: ignore[attr-defined]  # __new__'s
        lightning_arguments.check_hardware(type(self).__name__, kwargs, placement)
        if placement is not None:
            lightning_arguments.check_mixed_precision(
                type(self).__name__, kwargs.get("mixed_precision"), self.precision
            )
        wrap, activation_checkpointing = (
            lightning.get("wrap", wrap),
            lightning.get("activation_checkpointing", activation_checkpointing),
        )
        reshard_after_forward = lightning.get("reshard_after_forward", reshard_after_forward)
        shard_size, hybrid = lightning.get("shard_size", shard_size), lightning.get("hybrid", hybrid)
        self.replicas: int | None = lightning.get("replicas")  # device_mesh=(replicas, shard_size)
        # "full" (Lightning 2.6's default, and trainmesh's): a checkpoint is one file of whole tensors, gathered
        # on rank 0, that torch.load reads; "sharded": a distributed checkpoint directory, each rank its shards.
        self.state_dict_type: str = lightning.get("state_dict_type", "full")
        if isinstance(activation_checkpointing, type):  # Lightning's deprecated spelling takes one class
            activation_checkpointing = [activation_checkpointing]
        cpu_offload = bool(getattr(cpu_offload, "offload_params", cpu_offload))  # FSDP1's CPUOffload too
        self.release_host_memory = release_host_memory
        self.wrap, self.min_num_params = list(wrap or []), min_num_params
        self.reshard_after_forward, self.cpu_offload = reshard_after_forward, cpu_offload
        self.activation_checkpointing = list(activation_checkpointing or [])
        self.shard_size, self.hybrid = shard_size, hybrid or shard_size is not None
        self.name = "hsdp" if self.hybrid else ("fsdp" if reshard_after_forward else "sharded")
        if not self.capabilities.compile:
            refuse_compile(
                self.placement.compile,
                self.name,
                instead=f"no compiled {self.name} run is checked against eager yet; fsdp's is",
            )

    @property
    def capabilities(self) -> StrategyCapabilities:
        # Parameters unsharded under inference_mode would be inference tensors that training
        # cannot update in place afterwards: evaluation runs under no_grad instead. Manual
        # optimization is checked against plain torch under all three (tests/trainer/
        # test_manual_optimization*.py), compile against eager under fsdp only.
        checked = self.name == "fsdp"
        return StrategyCapabilities(
            manual_optimization=True,
            compile=checked,
            inference_mode=False,
            memory_model=_MEMORY_MODELS[self.name],
            communication_model=True,
            restore_checkpoint_after_setup=True,  # as Lightning's FSDP
            shards_parameters=True,
            splits_parameters=True,
            reseeds_each_run=True,
            whole_checkpoints=self.state_dict_type == "full",
        )

    def dims(self, world_size: int) -> ParallelDims:
        if not self.hybrid:
            return ParallelDims(dp_shard=-1).resolved(world_size)
        shard = self.shard_size or self.processes_per_node
        if shard == 1 and world_size > 1:
            raise ValueError(
                "hsdp with shard groups of 1 process shards nothing: every process would hold the whole "
                "model. Use strategy='ddp' for that, or a shard_size above 1"
            )
        if shard < 1 or world_size % shard:
            raise ValueError(
                f"hsdp shard groups of {shard} processes do not divide the {world_size} processes; choose a "
                f"shard_size that divides {world_size}"
            )
        if self.replicas is not None and self.replicas * shard != world_size:
            raise ValueError(
                f"device_mesh=({self.replicas}, {shard}) holds {self.replicas * shard} processes, but the run has "
                f"{world_size}; give a shape whose product is the world size"
            )
        return ParallelDims(dp_replicate=-1, dp_shard=shard).resolved(world_size)

    def module_init_context(self) -> AbstractContextManager[Any]:
        """configure_model builds on the meta device: no process holds the whole model."""
        return torch.device("meta")

    def setup_module(self, module: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import CPUOffloadPolicy

        if not any(True for _ in module.parameters()):
            raise ValueError(f"{type(module).__name__} has no parameters: there is nothing for fsdp to shard")
        refuse_keras(module, self.name)
        offload = self.cpu_offload and self._device.type != "cpu"
        if self.cpu_offload and not offload:
            # FSDP's offload moves shards from an accelerator to host memory; on CPU they are there.
            rank_zero_warn("FSDPStrategy(cpu_offload=True) has no effect on CPU: the shards already live in CPU memory")
        # The order matters: activation checkpointing wraps blocks first, so that the shard
        # units chosen next are the wrapped blocks; sharding before materializing means a model
        # built on the meta device is only ever allocated shard by shard.
        if self.activation_checkpointing:
            apply_activation_checkpointing(module, self.activation_checkpointing)
        units = shard_units(module, wrap=self.wrap, min_num_params=self.min_num_params)
        if (setting := compile_setting(self.placement.compile, module)) is not None:
            # Each block compiled, then sharded (torchtitan's order): its FSDP hooks wrap the
            # compiled block, and no graph holds another unit's all-gathers.
            apply_compile(module, options=setting, units=innermost(units))
        if self._device.type == "cpu" or offload:
            self._release_host_memory()
        on_meta = any(p.is_meta for p in module.parameters())
        # Converted before sharding, so each shard is made in the parameters' dtype ("-true"
        # precisions; complex buffers such as RoPE's keep theirs). On the meta device only the
        # dtype changes: materialize allocates on the device.
        self.precision.convert_module(module, device=None if on_meta else self._device)
        mesh = self._mesh.submesh("dp_replicate", "dp_shard") if not self.hybrid else self._mesh.device_mesh
        root = apply_fsdp(
            module,
            mesh,
            units,
            reshard_after_forward=self.reshard_after_forward,
            mp_policy=mixed_precision_policy(self.precision),
            offload_policy=CPUOffloadPolicy() if offload else None,
        )
        if on_meta:
            materialize(module, torch.device("cpu") if offload else self._device)
        # Its saves gather or write through DCP's state dicts ("full" and "sharded" alike): not inside the first.
        checkpoints.import_distributed_checkpoint()
        return root

    @property
    def worker_environment(self) -> dict[str, str]:
        # Torch reads its huge-page switch once, at a process's first CPU tensor: only the
        # launcher, which starts the workers, can set it early enough.
        host_memory = self.placement.device_type == "cpu" or self.cpu_offload
        return {HUGE_PAGES_VARIABLE: "1"} if host_memory and self.release_host_memory is not False else {}

    def _release_host_memory(self) -> None:
        """Shards, optimizer state and what each step gathers live in host memory: freed, they go
        back to the system instead of staying resident as heap holes, where that costs no speed
        (huge pages) or the user chose it (``release_host_memory``)."""
        if self.release_host_memory is False:
            return
        if self.release_host_memory or huge_pages_in_effect():
            release_large_frees()
            return
        rank_zero_info(
            f"{self.name}: torch's transparent huge pages are off in this process, so freed host memory stays in "
            "it (glibc's defaults: as fast as hand-written FSDP2, but a peak near ddp's). For both, start the "
            "processes with THP_MEM_ALLOC_ENABLE=1 in their environment (trainmesh's own launcher does); for "
            f"the lowest peak at up to 1.8x the CPU per step, {type(self).__name__}(release_host_memory=True)"
        )

    def setup_optimizers(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer]
    ) -> list[torch.optim.Optimizer]:
        return list(optimizers)  # built (or rebound) over the local shards

    def train_step(
        self, module: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool, hooks: StepHooks
    ) -> StepResult:
        # Through the root, so FSDP's root hooks run once around the whole step.
        return run_train_step(
            lambda: module(StepCall("training_step", call=hooks.call), batch, batch_idx),
            combine=whole_output,
            hooks=hooks,
            autocast=self.precision.autocast(),
            no_sync=None if sync_grads else fsdp_gradient_sync_off(module),
        )

    def eval_step(self, module: nn.Module, hook: str, batch: Any, batch_idx: int, *extra: Any, hooks: StepHooks) -> Any:
        return run_eval_step(
            lambda: module(StepCall(hook, call=hooks.call), batch, batch_idx, *extra),
            hooks=hooks,
            autocast=self.precision.autocast(),
        )

    def no_backward_sync(self, module: nn.Module) -> AbstractContextManager[Any]:
        return fsdp_gradient_sync_off(module)

    def state_dict(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, sharded: bool
    ) -> dict[str, Any]:
        assert module is not None, "fsdp's optimizer state is keyed by the module's parameter names"
        state = checkpoints.sharded_state_dict(checkpoints.unwrap(module), optimizers, sharded=sharded)
        if not sharded:
            # Whole tensors on rank 0 ({} on the others, as Lightning's rank0_only gather): the optimizer
            # state numbered, as Lightning's "full" file.
            state["optim"] = [checkpoints.numbered_as_torch(optimizer) for optimizer in state["optim"]]
        return state

    def load_state_dict(
        self,
        module: nn.Module | None,
        optimizers: Sequence[torch.optim.Optimizer],
        state: dict[str, Any],
        *,
        strict: bool = True,
    ) -> None:
        assert module is not None, "fsdp's optimizer state is keyed by the module's parameter names"
        checkpoints.load_sharded_state_dict(checkpoints.unwrap(module), optimizers, state, strict=strict)

    def save_checkpoint(
        self,
        checkpoint: dict[str, Any],
        path: str,
        *,
        sharded: CheckpointKeys | None,
        writer: CheckpointWriter = SYNCHRONOUS,
    ) -> None:
        if sharded is None or self.state_dict_type == "full":
            super().save_checkpoint(checkpoint, path, sharded=None, writer=writer)  # full state dicts, one file
            return
        # Every rank writes its own shards, in parallel: no rank ever holds the whole state.
        writer.write_distributed(
            checkpoint, path, rank=self._mesh.global_rank, sharded_keys=(sharded.model, sharded.optimizers)
        )

    def load_checkpoint(
        self, path: str, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, keys: CheckpointKeys
    ) -> dict[str, Any]:
        # A file holds full tensors: loaded on the CPU, then sharded by load_state_dict.
        return checkpoints.load(path, module, optimizers, keys=keys, map_location="cpu")


@contextlib.contextmanager
def gathered_whole(module: nn.Module, stages: Any, reshard_after_forward: bool) -> Any:
    """The FSDP-sharded layers of ``module`` and its stages gathered whole while inside (called
    with dp_shard > 1, where every data-parallel module is ``fully_shard``'s, never ``replicate``'s)."""
    from torch.distributed.fsdp import FSDPModule

    seen: dict[int, Any] = {}
    for root in [module, *stages]:
        for m in root.modules():
            if isinstance(m, FSDPModule) and id(m) not in seen:
                seen[id(m)] = m
    sharded = list(seen.values())
    for m in sharded:
        m.set_reshard_after_forward(False, recurse=False)
        m.unshard()
    try:
        yield
    finally:
        for m in sharded:
            m.reshard()
            m.set_reshard_after_forward(reshard_after_forward, recurse=False)
