"""Validation, test and predict loops, and the sanity check before training."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from trainmesh.seed import import_leaving_rng, isolate_rng
from trainmesh.strategies.step import StepHooks
from trainmesh.trainer.batch_counts import limited_count
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.model_mode import evaluation_mode, release_gradients
from trainmesh.trainer.profiling import FETCH_ACTION, profiled_call, profiled_iter, strategy_action
from trainmesh.trainer.run_summary import announce_run
from trainmesh.trainer.states import RunningStage
from trainmesh.utilities.distributed_samplers import is_padding

_STEP_HOOK = {
    "validate": "validation_step",
    "test": "test_step",
    "predict": "predict_step",
    "sanity_check": "validation_step",
}
_STEP_END_HOOK = {"validate": "validation_step_end", "test": "test_step_end", "sanity_check": "validation_step_end"}
# Lightning 1.x's epoch-end hooks that receive the epoch's step outputs.
_OUTPUTS_HOOK = {"validate": "validation_epoch_end", "test": "test_epoch_end", "sanity_check": "validation_epoch_end"}
_EPOCH_START_HOOK = {
    "validate": "on_validation_epoch_start",
    "test": "on_test_epoch_start",
    "predict": "on_predict_epoch_start",
    "sanity_check": "on_validation_epoch_start",
}
_EPOCH_END_HOOK = {
    "validate": "on_validation_epoch_end",
    "test": "on_test_epoch_end",
    "predict": "on_predict_epoch_end",
    "sanity_check": "on_validation_epoch_end",
}
_BATCH_END_HOOK = {
    "validate": "on_validation_batch_end",
    "test": "on_test_batch_end",
    "predict": "on_predict_batch_end",
    "sanity_check": "on_validation_batch_end",
}
_BATCH_START_HOOK = {
    "validate": "on_validation_batch_start",
    "test": "on_test_batch_start",
    "predict": "on_predict_batch_start",
    "sanity_check": "on_validation_batch_start",
}


def run_sanity_check(ctx: LoopContext, val_loaders: list[Any]) -> None:
    """Run a few validation batches before training so a broken validation_step fails fast.

    Every global generator is given back as it was (as Lightning does, with ``isolate_rng``):
    what the check draws (a shuffling loader's order, random numbers in validation_step) must
    not change training, or a seeded run's numbers would depend on ``num_sanity_val_steps``
    and differ from Lightning's.
    """
    ctx.state.sanity_checking = True
    hooks = ctx.hooks
    try:
        with isolate_rng():
            hooks.call_callbacks("on_sanity_check_start")
            limit = ctx.settings.num_sanity_val_steps
            with evaluation_mode(hooks, ctx.state.model, "sanity_check"):
                hooks.call("on_validation_start")  # as in Lightning: the sanity check is a validation run
                _run_loop(ctx, "sanity_check", val_loaders, limit if limit != -1 else float("inf"))
                hooks.call("on_validation_end")
            hooks.call_callbacks("on_sanity_check_end")
    finally:
        ctx.state.sanity_checking = False


def run_validation(ctx: LoopContext, val_loaders: list[Any], *, release_grads: bool = True) -> list[dict[str, float]]:
    """Validation inside fit: results go to callback_metrics and the loggers. ``release_grads``:
    no gradients are pending for an optimizer step (Lightning then zeroes them first)."""
    ctx.state.loop.validated_since_step = True
    hooks, run = ctx.hooks, ctx.state.trainer_state
    run.stage = RunningStage.VALIDATING  # trainer.validating, from before the zero_grad hook (Lightning's)
    if release_grads:
        release_gradients(hooks, ctx.state.module)
    with evaluation_mode(hooks, ctx.state.model, "validate"):
        hooks.call("on_validation_start")
        results = _run_loop(ctx, "validate", val_loaders, ctx.settings.limit_val_batches)
        hooks.call("on_validation_end")
    run.stage = RunningStage.TRAINING
    return results


def run_evaluation_stage(ctx: LoopContext, stage: str, data: Any) -> list[dict[str, float]]:
    """``trainer.validate()`` / ``trainer.test()``."""
    kind = "validate" if stage == "validate" else "test"
    loaders = device_loaders(ctx, data.loaders(kind, required=True), train=False)
    limit = ctx.settings.limit_val_batches if stage == "validate" else ctx.settings.limit_test_batches
    announce_run(ctx.view, ctx.state, ctx.runtime, stage, loaders[0] if loaders else None)
    start, end = (
        ("on_validation_start", "on_validation_end") if stage == "validate" else ("on_test_start", "on_test_end")
    )
    with evaluation_mode(ctx.hooks, ctx.state.model, stage):
        ctx.hooks.call(start)
        results = _run_loop(ctx, stage, loaders, limit)
        ctx.hooks.call(end)
    return results


def run_predict(ctx: LoopContext, data: Any) -> Any:
    loaders = device_loaders(ctx, data.loaders("predict", required=True), train=False)
    announce_run(ctx.view, ctx.state, ctx.runtime, "predict", loaders[0] if loaders else None)
    with evaluation_mode(ctx.hooks, ctx.state.model, "predict"):
        ctx.hooks.call("on_predict_start")
        outputs = [
            ctx.runtime._collect_predictions(per_loader)
            for per_loader in _run_loop(ctx, "predict", loaders, ctx.settings.limit_predict_batches)
        ]
        ctx.hooks.call("on_predict_end")
    return outputs[0] if len(outputs) == 1 else outputs


def device_loaders(ctx: LoopContext, loaders: list[Any], *, train: bool) -> list[Any]:
    """``loaders`` set up by the Runtime, their batches through the batch-transfer hooks, each
    told its place among ``loaders`` (Lightning's ``dataloader_idx``)."""
    if not loaders:
        return []
    placed = ctx.runtime.setup_dataloaders(*loaders, train=train, batch_hooks=ctx.batch_hooks)
    return list(placed) if len(loaders) > 1 else [placed]


def _run_loop(ctx: LoopContext, stage: str, loaders: list[Any], limit_setting: int | float) -> list[Any]:
    """Run ``stage`` over every loader; metrics per loader (or predictions for predict)."""
    state, hooks = ctx.state, ctx.hooks
    module = state.module
    step_hook = _STEP_HOOK[stage]
    if stage != "predict" and not hooks.module_overrides(step_hook):
        return [{} for _ in loaders]
    if stage == "predict" and not (hooks.module_overrides("predict_step") or _has_forward(module)):
        raise ValueError(
            f"{type(module).__name__} defines neither predict_step(batch, batch_idx) nor forward(); "
            "define one of them to predict"
        )
    extra_index = len(loaders) > 1 and _accepts_dataloader_idx(getattr(module, step_hook))
    results: list[Any] = []
    inference = ctx.inference_mode and ctx.runtime.capabilities.inference_mode
    with torch.inference_mode() if inference else torch.no_grad():
        if stage != "predict":
            hooks.call("on_epoch_start")  # Lightning 1.x's, around validation and test epochs too
        hooks.call(_EPOCH_START_HOOK[stage])
        kept: list[list[Any]] = []
        for loader_idx, loader in enumerate(loaders):
            extra = (loader_idx,) if extra_index else ()
            # The batch hooks get dataloader_idx where there are several loaders (as in Lightning)
            hook_extra = (loader_idx,) if len(loaders) > 1 else ()
            results.append(_run_one_loader(ctx, stage, loader, limit_setting, extra, kept, hook_extra))
        outputs_hook = _OUTPUTS_HOOK.get(stage)
        if outputs_hook is not None and hooks.module_overrides(outputs_hook):
            state.log_collector.set_batch(outputs_hook, None)
            hooks.call_module(outputs_hook, kept[0] if len(kept) == 1 else kept)
        if stage == "predict":
            state.log_collector.set_batch(_EPOCH_END_HOOK[stage], None)
            hooks.call(_EPOCH_END_HOOK[stage])
            return results
        # As in Lightning, the epoch's values of what the steps logged are in callback_metrics
        # when on_*_epoch_end runs; what the epoch-end hooks log is published after them.
        reduced = _reduce_and_show(ctx, stage, results)
        state.log_collector.set_batch(_EPOCH_END_HOOK[stage], None)
        hooks.call(_EPOCH_END_HOOK[stage])
        hooks.call("on_epoch_end")  # Lightning 1.x's
        return _publish(ctx, stage, reduced, state.log_collector.epoch_metrics())


def _run_one_loader(
    ctx: LoopContext,
    stage: str,
    loader: Any,
    limit_setting: int | float,
    extra: tuple[int, ...],
    kept: list[list[Any]],
    hook_extra: tuple[int, ...],
) -> Any:
    """Predictions of one loader, or its metric results (not yet reduced across ranks).

    Step outputs are appended to ``kept`` (one list per loader) when the module defines
    ``validation_epoch_end`` / ``test_epoch_end``, and only then.
    """
    state, log_collector, hooks, runtime = ctx.state, ctx.state.log_collector, ctx.hooks, ctx.runtime
    step_hook, batch_start, batch_end = _STEP_HOOK[stage], _BATCH_START_HOOK[stage], _BATCH_END_HOOK[stage]
    calls_batch_start = hooks.overridden(batch_start)
    limit = limited_count(loader, limit_setting)
    if stage == "sanity_check":  # a few validation batches, but never more than validation itself runs
        limit = min(limit, limited_count(loader, ctx.settings.limit_val_batches))
    state.set_batch_count(stage, limit)
    log_collector.start_stage()
    predictions: list[Any] = []
    step_end = _STEP_END_HOOK.get(stage)
    step_end = step_end if step_end is not None and hooks.module_overrides(step_end) else None
    step_hooks = StepHooks(
        step_end=None if step_end is None else getattr(state.module, step_end), chunk_scope=log_collector.chunk_scope
    )
    outputs_hook = _OUTPUTS_HOOK.get(stage)
    outputs: list[Any] | None = [] if outputs_hook is not None and hooks.module_overrides(outputs_hook) else None
    eval_step = profiled_call(runtime.eval_step, ctx.profiler, strategy_action(runtime, step_hook))
    for batch_idx, batch in enumerate(profiled_iter(loader, ctx.profiler, FETCH_ACTION[stage])):
        if batch_idx >= limit:
            break
        log_collector.set_batch(step_hook, batch)
        if calls_batch_start:
            hooks.call(batch_start, batch, batch_idx, *hook_extra)
        output = eval_step(state.model, step_hook, batch, batch_idx, *extra, hooks=step_hooks)
        if stage == "predict":
            predictions.append(output)
        elif outputs is not None and not is_padding(output):
            outputs.append(output)
        hooks.call(batch_end, output, batch, batch_idx, *hook_extra)
        runtime.supervision.step_done()
    if outputs is not None:
        kept.append(outputs)
    return predictions if stage == "predict" else log_collector.results


def _reduce_and_show(ctx: LoopContext, stage: str, per_loader: list[Any]) -> list[dict[str, Any]]:
    """Each loader's epoch metrics reduced across ranks, shown in callback_metrics (not yet sent
    to the loggers; not for the sanity check); then fresh results for the epoch-end hooks' logs."""
    log_collector, reduced = ctx.state.log_collector, []
    for loader_idx, results in enumerate(per_loader):
        log_collector.start_stage(results)
        metrics = log_collector.epoch_metrics()
        reduced.append(metrics)
        if stage != "sanity_check":
            ctx.publisher.epoch_metrics(metrics, suffix=_suffix(loader_idx, per_loader), to_logger=False)
    log_collector.start_stage()
    return reduced


def _publish(
    ctx: LoopContext, stage: str, reduced: list[dict[str, Any]], late: dict[str, Any]
) -> list[dict[str, float]]:
    """Publish each loader's metrics to callback_metrics and the loggers, with what the epoch-end
    hooks logged (``late``) beside the last loader's (not for the sanity check)."""
    if stage == "sanity_check":
        return [{} for _ in reduced]
    published = []
    for loader_idx, metrics in enumerate(reduced):
        extra = late if loader_idx == len(reduced) - 1 else {}
        published.append(ctx.publisher.epoch_metrics({**metrics, **extra}, suffix=_suffix(loader_idx, reduced)))
    return published


def _suffix(loader_idx: int, loaders: list[Any]) -> str:
    return f"/dataloader_idx_{loader_idx}" if len(loaders) > 1 else ""


def _has_forward(module: Any) -> bool:
    return type(module).forward is not torch.nn.Module.forward


def _accepts_dataloader_idx(step: Any) -> bool:
    try:
        return len(inspect.signature(step).parameters) >= 3
    except (TypeError, ValueError):
        return False


def print_results(stage: str, results: list[dict[str, float]]) -> None:
    """A table of the metrics each dataloader produced, as users of the seeds expect."""
    if not results or not any(results):
        return
    import_leaving_rng("rich.console")  # its first import draws from Python's random
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{stage} results")
    table.add_column("metric")
    for index in range(len(results)):
        table.add_column(f"dataloader {index}" if len(results) > 1 else "value", justify="right")
    names = sorted({name for result in results for name in result})
    for name in names:
        table.add_row(name, *[f"{r[name]:.6g}" if name in r else "" for r in results])
    Console().print(table)
