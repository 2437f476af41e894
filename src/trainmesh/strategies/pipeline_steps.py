"""One step of a module cut into pipeline stages (``ModelParallelStrategy`` with ``pp`` > 1): the
batch goes through the schedule in micro-batches; on the last stage the module's own step hook
runs on each micro-batch's output (training) or the whole batch's (evaluation), replayed with the
stage's activations (``stage_calls.py``); the step's result then reaches every rank, so that the
loop, the callbacks and the loggers decide alike on every stage.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, cast

import torch
from torch import nn

from trainmesh.strategies import collectives
from trainmesh.strategies.fsdp import gathered_whole
from trainmesh.strategies.mesh import ParallelMesh
from trainmesh.strategies.pipeline import Pipeline, rows, rows_in, shared_step_result
from trainmesh.strategies.stage_calls import replaying
from trainmesh.strategies.step import StepHooks, StepModule, StepResult, call_hook, loss_to_backward, run_eval_step
from trainmesh.utilities.collections import apply_to_tensors


def pipelined_train_step(
    pipeline: Pipeline,
    module: nn.Module,
    batch: Any,
    batch_idx: int,
    hooks: StepHooks,
    *,
    mesh: ParallelMesh,
    device: torch.device,
    step_context: Callable[[], AbstractContextManager[Any]],
) -> StepResult:
    """One training step through the pipeline schedule: ``training_step`` runs on each
    micro-batch's output on the last stage, and its loss, token count and output reach every rank."""
    if hooks.step_end is not None:
        raise ValueError(
            f"{type(module).__name__}.training_step_end cannot run under pipeline parallelism: the "
            "step's output exists per micro-batch on the last stage only; fold it into training_step"
        )
    hooks_of = cast(StepModule, module)
    inputs, kwargs = hooks_of.pipeline_input(batch), hooks_of.pipeline_kwargs(batch)
    microbatches = pipeline.microbatches
    losses: list[torch.Tensor] = []
    counts: list[torch.Tensor | None] = []
    outputs: list[Any] = []  # each micro-batch's training_step output (on the last stage)

    def loss_of_microbatch(output: Any, index: torch.Tensor) -> torch.Tensor:
        microbatch = rows(batch, index)
        with (
            replaying(
                module,
                output,
                hooks_of.pipeline_input(microbatch),
                "training_step",
                hooks_of.pipeline_kwargs(microbatch),
            ),
            hooks.chunk_scope(microbatch),
        ):
            step_output = call_hook(module, "training_step", (microbatch, batch_idx), hooks.call)
            loss, count = hooks.loss_of(step_output), hooks.count_of(step_output)
        losses.append(loss.detach())
        counts.append(count)
        outputs.append(step_output)
        if count is not None:
            return loss  # summed over tokens: the gradients are divided by the global count later
        # A mean loss: the batch's mean over its micro-batches (torch's scale_grads is off, see Pipeline).
        loss = loss_to_backward(loss, None, hooks.loss_divisor)
        return loss / microbatches

    follow_mode(pipeline, module)
    with step_context():
        pipeline.step(inputs, rows_in(inputs), training=True, loss=loss_of_microbatch, kwargs=kwargs)
    loss, count, output = shared_step_result(
        losses,
        counts,
        outputs,
        rows=rows_in(inputs) // microbatches,
        owner=type(module).__name__,
        mesh=mesh,
        stage_rank=pipeline.last_stage_rank,
        device=device,
    )
    hooks.check_loss(loss)
    return StepResult(loss, output, count)


def pipelined_eval_step(
    pipeline: Pipeline,
    module: nn.Module,
    hook: str,
    batch: Any,
    batch_idx: int,
    extra: tuple[Any, ...],
    hooks: StepHooks,
    *,
    mesh: ParallelMesh,
    reshard_after_forward: bool,
    step_context: Callable[[], AbstractContextManager[Any]],
) -> Any:
    """One validation, test or predict step through the pipeline schedule: the evaluation hook runs
    on the whole batch's output on the last stage, and its result reaches every rank."""
    hooks_of = cast(StepModule, module)
    inputs, kwargs = hooks_of.pipeline_input(batch), hooks_of.pipeline_kwargs(batch)
    size = rows_in(inputs)
    # Data-parallel peers may hold batches of different sizes here (micro-batches of other
    # shapes), or an empty one: the shards are gathered once per batch, the same
    # collective on every peer, and stay whole through the micro-batches.
    sharded = mesh.group_size("dp_shard") > 1
    with (
        gathered_whole(module, pipeline.stages.values(), reshard_after_forward) if sharded else contextlib.nullcontext()
    ):
        if size == 0:
            return None  # an empty batch: nothing to run
        follow_mode(pipeline, module)
        with step_context():
            output = pipeline.step(inputs, size, training=False, kwargs=kwargs)
    result = None
    if pipeline.holds_last:
        with replaying(module, output, inputs, hook, kwargs):
            result = run_eval_step(
                lambda: call_hook(module, hook, (batch, batch_idx, *extra), hooks.call),
                hooks=hooks,
                autocast=contextlib.nullcontext(),
            )
        result = apply_to_tensors(result, lambda t: t.detach().cpu())
    return collectives.from_last_stage(mesh, result, stage_rank=pipeline.last_stage_rank)


def follow_mode(pipeline: Pipeline, module: nn.Module) -> None:
    """Stage views of a rank with several stages follow the module's train/eval mode."""
    for view in pipeline.stages.values():
        if view is not module and view.training != module.training:
            view.train(module.training)
