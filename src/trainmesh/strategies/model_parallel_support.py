"""What a model-parallel run accepts from the model (checked before anything is cut or sharded)
and what it supports (its capabilities)."""

from __future__ import annotations

from typing import Any

from torch import nn

from trainmesh.strategies.capabilities import WORLD, MemoryModel, StrategyCapabilities
from trainmesh.strategies.fsdp import apply_fsdp, apply_replicate, mixed_precision_policy
from trainmesh.strategies.mesh import ParallelDims, ParallelMesh
from trainmesh.strategies.shard_units import shard_units
from trainmesh.strategies.tensor_parallel import check_tensor_parallel_plan, tensor_parallel_plan
from trainmesh.utilities.dtensors import is_dtensor

# Roughly: each rank holds 1/tp or 1/pp of the model and runs that share of its work.
_SPLIT_MODEL = MemoryModel(WORLD, WORLD, WORLD, splits_activations=True)

DDP_DOES_NOT_COMPOSE = (
    "nn.parallel.DistributedDataParallel does not compose with pipeline or tensor parallelism: with a "
    "pipeline it hits an internal assert, or (static_graph=True) trains silently wrong weights; with tensor "
    "parallelism it fails on mixed Tensor/DTensor gradients. trainmesh replicates model-parallel runs with "
    "FSDP2 instead (replicate for dp_replicate, fully_shard for dp_shard), which gives the same result"
)


PIPELINE_RUNS_BACKWARD = (
    "a pipeline schedule (torch.distributed.pipelining) runs every micro-batch's forward and backward itself, "
    "stage by stage across the ranks, and calls training_step only on the last stage, as the loss function of "
    "one micro-batch: no rank runs training_step for the whole batch, so there is no point where its "
    "manual_backward or opt.step() could run. Return the loss from training_step (automatic optimization), or "
    "use a layout without pipeline stages (tp, fsdp_tp, fsdp) for manual optimization"
)


def check_model_parallel_settings(data_parallel: str, microbatches: Any, precision: Any) -> None:
    """Refuse settings that cannot compose with model parallelism, as the strategy is built."""
    if data_parallel != "fsdp":
        raise ValueError(
            f"data_parallel={data_parallel!r}: {DDP_DOES_NOT_COMPOSE}. Leave data_parallel='fsdp'"
            if data_parallel == "ddp"
            else f"data_parallel={data_parallel!r} is not known; model-parallel runs replicate and shard with 'fsdp'"
        )
    if microbatches is not None and (not isinstance(microbatches, int) or microbatches < 1):
        raise ValueError(f"microbatches={microbatches!r}; give a positive number of micro-batches per batch")
    if precision.scaler is not None:
        raise ValueError(
            f"precision={precision.name!r} scales the loss with a GradScaler, which cannot see a pipeline "
            "stage's or a tensor shard's overflow on the other ranks; use precision='bf16-mixed' (no scaling needed)"
        )


def check_model_parallel_module(module: nn.Module, tp: int) -> Any:
    """Refuse what cannot compose with model parallelism; return the module's tensor-parallel
    plan (None: it states none)."""
    if _defines_configure_ddp(module):
        raise ValueError(
            f"{type(module).__name__} defines configure_ddp, but {DDP_DOES_NOT_COMPOSE}; remove "
            "configure_ddp for model-parallel runs"
        )
    plan = tensor_parallel_plan(module)
    if tp > 1:
        if plan is None and not _has_dtensors(module):
            raise ValueError(
                f"tp={tp} but {type(module).__name__} states no tensor_parallel_plan() and applied "
                "none in configure_model(mesh); return {module name: ColwiseParallel()/RowwiseParallel()...}"
            )
        if plan is not None:
            check_tensor_parallel_plan(module, plan, tp)  # on the whole model: names of every stage
    return plan


def apply_data_parallel(
    stage: nn.Module, mesh: ParallelMesh, precision: Any, reshard_after_forward: bool, *, as_step_root: bool
) -> Any:
    """FSDP2 on the data-parallel axes of ``mesh`` (fsdp.py's functions, with the run's mixed
    precision): each block its own unit, then the stage's root, which it returns."""
    replicas, shards = mesh.group_size("dp_replicate"), mesh.group_size("dp_shard")
    policy = mixed_precision_policy(precision)
    if shards > 1:
        dp_mesh = mesh.device_mesh["dp_replicate", "dp_shard"] if replicas > 1 else mesh.submesh("dp_shard")
        return apply_fsdp(
            stage,
            dp_mesh,
            shard_units(stage, wrap=None, min_num_params=None),
            reshard_after_forward=reshard_after_forward,
            mp_policy=policy,
            step_root=as_step_root,
        )
    return apply_replicate(stage, mesh.submesh("dp_replicate"), mp_policy=policy, step_root=as_step_root)


def model_parallel_capabilities(dims: ParallelDims, *, replicated: bool) -> StrategyCapabilities:
    """What a model-parallel run on ``dims`` supports (``replicated``: dp_replicate asked for).

    >>> model_parallel_capabilities(ParallelDims(tp=2, dp_shard=1).resolved(2), replicated=False).flop_counting
    False
    """
    # FlopCounterMode counts DTensor ops at their global shapes (tp times one rank's work), and a
    # pipeline's stages run backward with autograd.grad, which its module tracker refuses; the
    # schedule runs backward per micro-batch and stage, with no loss on most ranks, so the
    # backward hooks have nothing to run around. DTensor and FSDP parameters must not become
    # inference tensors between training steps. Each rank holds a share of the model; with
    # replicas (pp_within_node) a rank holds 1/pp of it, not 1/world size, which the memory model
    # cannot say.
    return StrategyCapabilities(
        manual_optimization=dims.pp
        == 1,  # checked against plain torch at tp=2 (test_manual_optimization_strategies.py)
        manual_optimization_refusal="" if dims.pp == 1 else PIPELINE_RUNS_BACKWARD,
        flop_counting=dims.tp == 1 and dims.pp == 1,
        restore_checkpoint_after_setup=True,  # as Lightning's ModelParallelStrategy
        backward_hooks=dims.pp == 1,
        inference_mode=False,
        memory_model=None if replicated else _SPLIT_MODEL,
        shards_parameters=dims.dp_shard > 1,
        splits_parameters=dims.dp_shard > 1 or dims.tp > 1,
        reseeds_each_run=True,
    )


def _defines_configure_ddp(module: nn.Module) -> bool:
    """Whether the user's class (not trainmesh's Module, whose default returns None) defines it."""
    for cls in type(module).__mro__:
        if "configure_ddp" in vars(cls):
            return cls.__module__ != "trainmesh.module"
    return False


def _has_dtensors(module: nn.Module) -> bool:
    return any(is_dtensor(p) for p in module.parameters())
