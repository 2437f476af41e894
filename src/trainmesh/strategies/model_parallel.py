"""Model parallelism on one mesh: pipeline stages (``pp``), replicas (``dp_replicate``), shards
(``dp_shard``) and tensor-parallel ways (``tp``), any of them 1, with PyTorch's own engine.

``ModelParallelStrategy`` applies, in this order (torchtitan's):

1. the pipeline cut: this rank keeps its stages' layers (``pipeline.py``); cutting first means
   everything after it touches only the layers this rank holds;
2. tensor parallelism on the ``tp`` axis (``tensor_parallel.py``): it must see plain
   ``nn.Linear``/``nn.Embedding`` layers, before any wrapper;
3. activation checkpointing, around the (tensor-parallel) blocks;
4. data parallelism on the data-parallel axes with FSDP2: ``fully_shard`` (dp_shard, and HSDP
   with dp_replicate) or its ``replicate``. Never ``nn.parallel.DistributedDataParallel``: with
   pipeline or tensor parallelism it asserts, or runs and is silently wrong (see
   ``../shared/experiments/mesh_test.py``);
5. the pipeline schedule, built at the first step (a stage fixes its shapes then); a step through
   it is ``pipeline_steps.py``'s.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import torch
from torch import nn

from trainmesh.checkpoint.keys import CheckpointKeys
from trainmesh.checkpoint.writers import SYNCHRONOUS, CheckpointWriter
from trainmesh.strategies import checkpoint as checkpoints
from trainmesh.strategies import collectives, stage_state
from trainmesh.strategies import lightning_model_parallel as lightning
from trainmesh.strategies.capabilities import StrategyCapabilities
from trainmesh.strategies.compile import refuse_compile
from trainmesh.strategies.data_parallel import StepCall
from trainmesh.strategies.distributed import DistributedStrategy
from trainmesh.strategies.fsdp import apply_activation_checkpointing, refuse_keras
from trainmesh.strategies.gradients import clip_gradients_globally, fsdp_gradient_sync_off
from trainmesh.strategies.materialize import materialize, meta_tensor_names
from trainmesh.strategies.mesh import AXES, ParallelDims
from trainmesh.strategies.model_parallel_support import (
    apply_data_parallel,
    check_model_parallel_module,
    check_model_parallel_settings,
    model_parallel_capabilities,
)
from trainmesh.strategies.pipeline import Pipeline, check_pipeline_loader, choose_schedule, stage_indices
from trainmesh.strategies.pipeline_cut import keep_only, split_parts, stage_view
from trainmesh.strategies.pipeline_steps import pipelined_eval_step, pipelined_train_step
from trainmesh.strategies.protocol import Placement
from trainmesh.strategies.stage_calls import refuse_direct_calls
from trainmesh.strategies.step import StepHooks, StepResult, call_hook, run_eval_step, run_train_step, whole_output
from trainmesh.strategies.tensor_parallel import apply_tp
from trainmesh.strategies.tied import OWN_PLAN, PLAN, StageCopies, TieRecorder, retie_after_tp
from trainmesh.utilities import docstrings

# A model split over a machine's devices, replicated across machines: pipeline stages on
# neighbouring ranks (one node), replicas across nodes.
PP_WITHIN_NODE_ORDER = ("dp_replicate", "dp_shard", "pp", "tp")


class ModelParallelStrategy(DistributedStrategy):
    __doc__ = docstrings.MODEL_PARALLEL_STRATEGY  # Args and Examples; the file is near 500 lines

    name = "model_parallel"
    positional_argument = "parallelize_fn"  # Lightning Fabric's first argument (strategies/arguments.py)

    def __init__(
        self,
        parallelize_fn: Any = None,  # Lightning Fabric's form: fabric.setup calls parallelize_fn(module, mesh)
        *,
        pp: int = 1,
        tp: int = 1,
        dp_shard: int = -1,
        dp_replicate: int = 1,
        schedule: str = "1F1B",
        microbatches: int | None = None,
        split_points: Sequence[str] | None = None,
        stages_per_rank: int | None = None,
        loss_parallel: bool = False,
        activation_checkpointing: Sequence[type[nn.Module]] | None = None,
        reshard_after_forward: bool = True,
        data_parallel: str = "fsdp",
        pp_within_node: bool = False,
        start_method: str = "elastic",
        timeout: timedelta = timedelta(minutes=30),
        process_group_backend: str | None = None,
        placement: Placement | None = None,
        **kwargs: Any,
    ) -> None:
        # Lightning's form (data_parallel_size=, ...): configure_model parallelizes (lightning_model_parallel.py)
        self._lightning = lightning.lightning_form(kwargs, parallelize_fn)
        lightning.check_not_mixed(
            self._lightning, {"pp": pp, "tp": tp, "dp_shard": dp_shard, "dp_replicate": dp_replicate}
        )
        self.module_device_mesh: Any = None  # Lightning's form: the mesh the module sees as self.device_mesh
        self.empty_init_on_meta = self._lightning is not None  # Lightning's trainer.init_module(empty_init=True)
        super().__init__(
            start_method=start_method, timeout=timeout, process_group_backend=process_group_backend, placement=placement
        )
        refuse_compile(
            self.placement.compile, self.name, instead="compile with tensor parallel and pipelines is untested"
        )
        check_model_parallel_settings(data_parallel, microbatches, self.precision)
        self.schedule = choose_schedule(schedule, stages_per_rank)
        self.sizes = {"pp": pp, "tp": tp, "dp_shard": dp_shard, "dp_replicate": dp_replicate}
        self.microbatches, self.split_points = microbatches, list(split_points or []) or None
        self.loss_parallel, self.reshard_after_forward = loss_parallel, reshard_after_forward
        self.activation_checkpointing = list(activation_checkpointing or [])
        self.order = PP_WITHIN_NODE_ORDER if pp_within_node else AXES
        self._pipeline: Pipeline | None = None
        self._root: nn.Module | None = None  # the FSDP root a stage-less step runs through
        self._whole_model_order: dict[str, int] = {}
        self._stage_copies: StageCopies | None = None  # tied weights whose uses sit on different pipeline ranks
        self._ties_seen = TieRecorder()  # the parameters configure_model registered (a tie it split)
        self._ties: list[tuple[str, ...]] = []  # every tied group's names, found before the cut
        self._cut: list[list[str]] = []  # every pipeline stage's parts
        self._gradient_sync_off = False  # inside no_backward_sync: tied copies' gradients not summed yet

    @property
    def capabilities(self) -> StrategyCapabilities:
        return model_parallel_capabilities(self._mesh.dims, replicated=self.sizes["dp_replicate"] != 1)

    def refuse_for_trainer(self) -> None:
        lightning.refuse_fabric_form(self._lightning)

    @property
    def metrics_source(self) -> Any:
        if self._pipeline is None:
            return None
        # The pipeline rank holding the last stage (the first one, under a V-shaped schedule).
        return functools.partial(collectives.from_last_stage, self._mesh, stage_rank=self._pipeline.last_stage_rank)

    def dims(self, world_size: int) -> ParallelDims:
        stages = self.sizes["pp"]
        if isinstance(stages, int) and stages > world_size:
            raise ValueError(
                f"pp={stages} pipeline stages need at least {stages} processes, but the run has "
                f"{world_size}; use pp <= devices x nodes (and stages_per_rank for more stages per rank)"
            )
        if self._lightning is not None:
            dp, tp = lightning.resolved_sizes(
                self._lightning, world_size=world_size, num_nodes=self.placement.num_nodes
            )
            return ParallelDims(tp=tp, dp_shard=dp, order=self.order).resolved(world_size)
        return ParallelDims(**self.sizes, order=self.order).resolved(world_size)

    def setup_environment(self, process: Any) -> None:
        super().setup_environment(process)
        if self._lightning is not None:
            dims = self._mesh.dims
            self.module_device_mesh = lightning.build_device_mesh(self._device.type, dims.dp_shard, dims.tp)

    # ---- placing the model: the written order -------------------------------------------------
    def module_init_context(self) -> AbstractContextManager[Any]:
        """configure_model builds on the meta device: each rank allocates only its stages' shards;
        the parameters it registers are recorded (a tie its own parallelize_module splits). In
        Lightning's form on the real device, where Lightning builds."""
        return contextlib.nullcontext() if self._lightning is not None else self._ties_seen.recording("meta")

    def setup_module(self, module: nn.Module) -> nn.Module:
        refuse_keras(module, self.name)
        if self._lightning is not None:  # configure_model (or Fabric's parallelize_fn) parallelizes it
            mesh, dp = self.module_device_mesh, self._mesh.dims.dp_shard
            return lightning.place(module, self._lightning, mesh, self.precision, self._device, data_parallel=dp)
        mesh = self._mesh
        tp = mesh.group_size("tp")
        plan = check_model_parallel_module(module, tp)
        # Built on the meta device (configure_model): cut, split and sharded there, then only this
        # rank's layers and shards are allocated (materialize, after 4), torchtitan's order.
        on_meta = bool(meta_tensor_names(module))
        # Tied weights, found while the model is whole (or as configure_model registered them): the
        # cut and tensor parallelism replace or drop parameters, after which nothing shows the ties.
        ties = self._ties = self._ties_seen.ties(module)
        module = self.precision.convert_module(module, device=None if on_meta else self._device)
        stage_parts = self._cut_pipeline(module)  # 1
        if tp > 1 and plan is not None:
            apply_tp(module, mesh.submesh("tp"), plan)  # 2
        retie_after_tp(module, ties, plan=PLAN if plan is not None else OWN_PLAN)  # configure_model's split too
        if mesh.group_size("pp") > 1 and ties:
            # Before data parallelism: the copies are made equal on tensors it has not sharded yet.
            # On meta the copies are made equal once materialized (each stage initialised its own).
            self._stage_copies = StageCopies.build(
                module,
                ties,
                stage_parts=stage_parts,
                sharded_by_data_parallel=mesh.dp_size > 1,
                pp_rank=mesh.rank("pp"),
                mesh=mesh,
                device=self._device,
                equalize=not on_meta,
            )
        if self.activation_checkpointing:
            apply_activation_checkpointing(module, self.activation_checkpointing)  # 3
        stages = {
            index: module if len(stage_parts) == 1 else stage_view(module, set(parts))
            for index, parts in stage_parts.items()
        }
        pp = mesh.group_size("pp")
        if mesh.dp_size > 1:  # 4
            for view in stages.values():
                root = apply_data_parallel(view, mesh, self.precision, self.reshard_after_forward, as_step_root=pp == 1)
            self._root = root if pp == 1 else None  # without a pipeline, the one stage is the step's root
        if on_meta:
            materialize(module, self._device)  # every layer's initialiser, then the model's init_weights()
            if self._stage_copies is not None:
                self._stage_copies.make_equal(module, self._device)
        if mesh.group_size("pp") > 1:  # 5 (built at the first step)
            num_stages = self._num_stages()
            microbatches, group = self.microbatches or num_stages, mesh.group("pp")
            self._pipeline = Pipeline(stages, self._cut, num_stages, self.schedule, microbatches, group, self._device)
            refuse_direct_calls(module)  # a user's loop calling model(x) would get a stage's activations
        checkpoints.import_distributed_checkpoint()  # its saves are DCP's: not inside the first
        return module

    def _cut_pipeline(self, module: nn.Module) -> dict[int, list[str]]:
        """This rank's stages and their parts ({0: everything} without a pipeline)."""
        pp = self._mesh.group_size("pp")
        if pp == 1:
            return {0: []}
        # Parameter names in the whole model's order: the order one process's optimizer lists them.
        self._whole_model_order = {name: i for i, (name, _) in enumerate(module.named_parameters())}
        cut = self._cut = split_parts(module, self._num_stages(), self.split_points)
        mine = {index: cut[index] for index in stage_indices(self._mesh.rank("pp"), pp, self.schedule)}
        keep_only(module, {part for parts in mine.values() for part in parts})
        return mine

    def _checked_loader(self, loader: Any, *, train: bool) -> Any:
        if self._mesh.group_size("pp") > 1:  # whole microbatches in every batch of the sharded loader
            check_pipeline_loader(
                loader, train=train, microbatches=self.microbatches or self._num_stages(), schedule=self.schedule
            )
        return loader

    def _num_stages(self) -> int:
        return self._mesh.group_size("pp") * self.schedule.stages_per_rank

    def setup_optimizers(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer]
    ) -> list[torch.optim.Optimizer]:
        return list(optimizers)  # built over (or rebound to) this rank's layers and shards

    # ---- the step -------------------------------------------------------------------------------
    def _step_context(self) -> AbstractContextManager[Any]:
        if not self.loss_parallel:
            return self.precision.autocast()
        from torch.distributed.tensor.parallel import loss_parallel

        stack = contextlib.ExitStack()
        stack.enter_context(loss_parallel())
        stack.enter_context(self.precision.autocast())
        return stack

    def train_step(
        self, module: nn.Module, batch: Any, batch_idx: int, *, sync_grads: bool, hooks: StepHooks
    ) -> StepResult:
        if self._pipeline is None:
            root = self._root
            forward = (
                (lambda: root(StepCall("training_step", call=hooks.call), batch, batch_idx))
                if root is not None
                else (lambda: call_hook(module, "training_step", (batch, batch_idx), hooks.call))
            )
            no_sync = None if sync_grads or root is None else fsdp_gradient_sync_off(module)
            with self._step_context() if self.loss_parallel else contextlib.nullcontext():
                return run_train_step(
                    forward, combine=whole_output, hooks=hooks, autocast=self.precision.autocast(), no_sync=no_sync
                )
        result = pipelined_train_step(
            self._pipeline,
            module,
            batch,
            batch_idx,
            hooks,
            mesh=self._mesh,
            device=self._device,
            step_context=self._step_context,
        )
        if self._stage_copies is not None and sync_grads and not self._gradient_sync_off:
            # The window's gradients are final here (data parallel reduced them in the schedule's
            # backward): each tied copy's becomes the sum of every stage's, before clipping and
            # the optimizer step, so the copies take the same update.
            self._stage_copies.sum_gradients(module, self._device)
        return result

    def eval_step(self, module: nn.Module, hook: str, batch: Any, batch_idx: int, *extra: Any, hooks: StepHooks) -> Any:
        if self._pipeline is None:
            root = self._root
            forward = (
                (lambda: root(StepCall(hook, call=hooks.call), batch, batch_idx, *extra))
                if root is not None
                else (lambda: call_hook(module, hook, (batch, batch_idx, *extra), hooks.call))
            )
            with self._step_context() if self.loss_parallel else contextlib.nullcontext():
                return run_eval_step(forward, hooks=hooks, autocast=self.precision.autocast())
        return pipelined_eval_step(
            self._pipeline,
            module,
            hook,
            batch,
            batch_idx,
            extra,
            hooks,
            mesh=self._mesh,
            reshard_after_forward=self.reshard_after_forward,
            step_context=self._step_context,
        )

    @contextlib.contextmanager
    def no_backward_sync(self, module: nn.Module) -> Iterator[None]:
        # Tied copies' gradients are summed once per accumulation window, like data parallel's.
        self._gradient_sync_off = True
        try:
            with fsdp_gradient_sync_off(module):
                yield
        finally:
            self._gradient_sync_off = False

    def clip_gradients(
        self,
        module: nn.Module,
        parameters: Sequence[torch.Tensor],
        *,
        max_norm: float | None,
        clip_value: float | None,
        norm_type: float,
    ) -> torch.Tensor | None:
        pipelined = self._mesh.group_size("pp") > 1
        counted_elsewhere = self._stage_copies.counted_elsewhere(module) if self._stage_copies is not None else set()
        return clip_gradients_globally(
            list(parameters),
            max_norm=max_norm,
            clip_value=clip_value,
            norm_type=norm_type,
            across_stages=pipelined,
            stage_group=self._mesh.group("pp") if pipelined else None,
            counted_elsewhere=counted_elsewhere,
        )

    # ---- checkpoints (stage_state.py: every stage's share of one whole model's state) ------------
    def state_dict(
        self, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, sharded: bool
    ) -> dict[str, Any]:
        assert module is not None, "model-parallel optimizer state is keyed by the module's parameter names"
        return stage_state.state_dict(
            module, optimizers, self._mesh, sharded=sharded, whole_model_order=self._whole_model_order
        )

    def load_state_dict(
        self,
        module: nn.Module | None,
        optimizers: Sequence[torch.optim.Optimizer],
        state: dict[str, Any],
        *,
        strict: bool = True,
    ) -> None:
        assert module is not None, "model-parallel optimizer state is keyed by the module's parameter names"
        stage_state.load_state_dict(module, optimizers, state, self._mesh, strict=strict, ties=self._ties)

    def save_checkpoint(
        self,
        checkpoint: dict[str, Any],
        path: str,
        *,
        sharded: CheckpointKeys | None,
        writer: CheckpointWriter = SYNCHRONOUS,
    ) -> None:
        if sharded is not None and self._lightning is not None and not self._lightning.save_distributed_checkpoint:
            checkpoint, sharded = lightning.whole(checkpoint, (sharded.model, sharded.optimizers)), None  # one file
        if sharded is None:
            super().save_checkpoint(checkpoint, path, sharded=None, writer=writer)
            return
        # Every rank writes its own layers and shards; replicas' copies are written once.
        writer.write_distributed(
            checkpoint, path, rank=self._mesh.global_rank, sharded_keys=(sharded.model, sharded.optimizers)
        )

    def load_checkpoint(
        self, path: str, module: nn.Module | None, optimizers: Sequence[torch.optim.Optimizer], *, keys: CheckpointKeys
    ) -> dict[str, Any]:
        if self._mesh.group_size("pp") == 1 or module is None:
            return checkpoints.load(path, module, optimizers, keys=keys, map_location="cpu")
        # Each stage reads its own layers; together the stages must hold the checkpoint's.
        return stage_state.load_checkpoint(path, module, optimizers, keys, self._mesh, ties=self._ties)
