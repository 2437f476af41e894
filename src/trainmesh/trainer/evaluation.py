"""Validation, test and predict loops, and the sanity check before training."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from trainmesh.seed import isolate_rng
from trainmesh.strategies.step import StepHooks
from trainmesh.trainer.batch_counts import limited_count
from trainmesh.trainer.combined_loaders import combined_batches, inner_loaders
from trainmesh.trainer.evaluation_epoch import (
    loader_suffix,
    publish_epoch,
    reduce_and_show,
    show_finished_loaders,
    shows_loaders,
    step_counter,
)
from trainmesh.trainer.evaluation_shares import steps_owed, warn_replicated_samples
from trainmesh.trainer.fetching import Fetcher, sequential_fetcher
from trainmesh.trainer.iterator_timing import makes_iterators_as_1_9
from trainmesh.trainer.loader_checks import warn_of_loader_settings
from trainmesh.trainer.loader_lengths import RuntimeSum, check_loader_lengths
from trainmesh.trainer.loader_results import LoaderResults
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.loop_progress import Counts, Progress
from trainmesh.trainer.model_mode import evaluation_mode, release_gradients
from trainmesh.trainer.prediction_loop import indexed
from trainmesh.trainer.profiling import FETCH_ACTION, profiled_call, profiled_iter, strategy_action
from trainmesh.trainer.results import StageResults, reset_metric_objects
from trainmesh.trainer.run_summary import announce_run
from trainmesh.trainer.stage_requirements import require_dataloader_idx
from trainmesh.trainer.states import RunningStage

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
_START_END_HOOKS = {
    "validate": ("on_validation_start", "on_validation_end"),
    "test": ("on_test_start", "on_test_end"),
    "predict": ("on_predict_start", "on_predict_end"),
    "sanity_check": ("on_validation_start", "on_validation_end"),
}
_BATCH_START_HOOK = {
    "validate": "on_validation_batch_start",
    "test": "on_test_batch_start",
    "predict": "on_predict_batch_start",
    "sanity_check": "on_validation_batch_start",
}


def run_sanity_check(
    ctx: LoopContext, val_loaders: Callable[[], list[Any]], val_limit: Callable[[], int | float] | None = None
) -> None:
    """Run a few validation batches before training so a broken validation_step fails fast.

    Every global generator is given back as it was (as Lightning does, with ``isolate_rng``):
    what the check draws (a shuffling loader's order, random numbers in validation_step) must
    not change training, or a seeded run's numbers would depend on ``num_sanity_val_steps``
    and differ from Lightning's. ``val_loaders()`` asks for the loaders (the first time: after
    ``on_sanity_check_start``, as Lightning's). Its metrics are in callback_metrics while it runs
    (not in the loggers; with several loaders only the epoch hooks', ``shows_loaders``) and gone
    after it, as Lightning's; what was there before (a resumed fit's) is back then.
    """
    state = ctx.state
    before = (
        state.epoch_metrics,
        state.logged_metrics,
        state.bar_epoch_metrics,
        state.wide_metrics,
        state.bar_step_metrics,
    )
    state.epoch_metrics, state.logged_metrics, state.bar_epoch_metrics, state.wide_metrics = {}, {}, {}, set()
    state.bar_step_metrics = {}
    state.sanity_checking = True
    hooks = ctx.hooks
    try:
        with isolate_rng():
            hooks.call_callbacks("on_sanity_check_start")
            limit = ctx.settings.num_sanity_val_steps
            # as in Lightning: the sanity check is a validation run
            loaders = val_loaders()
            _evaluate(_with_val_limit(ctx, val_limit), "sanity_check", loaders, limit if limit != -1 else float("inf"))
            hooks.call_callbacks("on_sanity_check_end")
        state.progress.fit_validation.clear()  # as Lightning, which counts the fit's validation from here
    finally:
        state.sanity_checking = False
        state.epoch_metrics, state.logged_metrics, state.bar_epoch_metrics, state.wide_metrics = before[:4]
        state.bar_step_metrics = before[4]
        state.written_metrics, state.computed_metrics = {}, {}  # Lightning's reset_metrics after the check


def run_validation(
    ctx: LoopContext,
    val_loaders: Callable[[], list[Any]],
    *,
    release_grads: bool = True,
    val_limit: Callable[[], int | float] | None = None,
) -> list[dict[str, float]]:
    """Validation inside fit: results go to callback_metrics and the loggers. ``release_grads``:
    no gradients are pending for an optimizer step (Lightning then zeroes them first).
    ``val_loaders()`` asks for the loaders, after that, where nothing asked before (Lightning's order);
    ``val_limit()``, then, the ``limit_val_batches`` they were set up with (the settings' where not given)."""
    run = ctx.state.trainer_state
    run.stage = RunningStage.VALIDATING  # trainer.validating, from before the zero_grad hook (Lightning's)
    if release_grads:
        release_gradients(ctx.hooks, ctx.state.module)
    loaders = val_loaders()
    evaluating = _with_val_limit(ctx, val_limit)
    results = _evaluate(evaluating, "validate", loaders, evaluating.settings.limit_val_batches)
    if ctx.state.val_clock is not None:  # a time-based interval counts from the validation's end (Lightning's)
        ctx.state.val_clock.restart()
    run.stage = RunningStage.TRAINING
    return results


def start_stage(ctx: LoopContext) -> None:
    """What Lightning's ``_run`` does between the module's setup and the stage's loop, in its order:
    the hyperparameters logged, then ``module.zero_grad()`` (a gradient left by an earlier run or by
    the program is gone, ``None``, before the first batch)."""
    if ctx.log_hyperparams:  # Trainer(enable_autolog_hparams=False): not
        ctx.publisher.hyperparameters()
    ctx.state.module.zero_grad()


def run_evaluation_stage(ctx: LoopContext, stage: str, data: Any) -> list[dict[str, float]]:
    """``trainer.validate()`` / ``trainer.test()``."""
    kind = "validate" if stage == "validate" else "test"
    start_stage(ctx)
    limit = ctx.settings.limit_val_batches if stage == "validate" else ctx.settings.limit_test_batches
    if limit == 0:  # Lightning's skipped loop: no loader asked for, no hook, nothing returned
        return []
    given = data.loaders(kind, required=True)
    loaders = device_loaders(ctx, given, train=False, kind=kind, shape=data.shapes.get(kind))
    warn_replicated_samples(stage, given, loaders)
    announce_run(ctx.view, ctx.state, ctx.runtime, stage, loaders[0] if loaders else None)
    ctx.state.eval_step_counts[stage] = {}  # each validate/test call counts its batches from 0 (Lightning's)
    return _evaluate(ctx, stage, loaders, limit)


def run_predict(ctx: LoopContext, data: Any) -> Any:
    from trainmesh.callbacks.prediction_writer import BasePredictionWriter  # here: only predict looks for one

    start_stage(ctx)
    given = data.loaders("predict", required=True)
    loaders = device_loaders(ctx, given, train=False, kind="predict", shape=data.shapes.get("predict"))
    for loader in loaders:  # each batch's sample indices known, for BasePredictionWriter (prediction_loop.py)
        loader.loader = indexed(loader.loader)
    writers = [callback for callback in ctx.view.callbacks if isinstance(callback, BasePredictionWriter)]
    ctx.state.predict_loop.start(len(loaders), writers)
    announce_run(ctx.view, ctx.state, ctx.runtime, "predict", loaders[0] if loaders else None)
    # Each rank's own predictions (its unpadded share), as Lightning's ranks return theirs
    outputs = _evaluate(ctx, "predict", loaders, ctx.settings.limit_predict_batches)
    if not outputs:  # no batch to predict (no loader, or every one empty): Lightning's skipped loop
        return None
    return outputs[0] if len(outputs) == 1 else outputs


def device_loaders(ctx: LoopContext, loaders: list[Any], *, train: bool, kind: str, shape: Any = None) -> list[Any]:
    """``loaders`` set up by the Runtime, their batches through the batch-transfer hooks, each
    told its place among ``loaders`` (Lightning's ``dataloader_idx``); kept as ``kind``'s
    (``trainer.train_dataloader``, ``val_dataloaders``, ...), with ``shape``, what the program
    gave them as."""
    ctx.state.stage_shapes[kind] = shape
    if not loaders:
        return []
    warn_of_loader_settings(
        loaders, kind, len(ctx.runtime.device_indices), reload_every_n_epochs=ctx.reload_every_n_epochs
    )
    owners = (ctx.state.model, ctx.state.datamodule)
    check_loader_lengths(loaders, train=train, strategy=RuntimeSum(ctx.runtime), owners=owners)
    loaders = [combined_batches(ctx, loader, train=train) for loader in loaders]
    placed = ctx.runtime.setup_dataloaders(
        *loaders,
        train=train,
        batch_hooks=ctx.batch_hooks,
        distribute=ctx.use_distributed_sampler,
        shuffle=ctx.shuffle_training if train else None,
        predict=kind == "predict",
        wrap_samplers=ctx.wrap_samplers,
    )
    found = ctx.state.stage_loaders[kind] = list(placed) if len(loaders) > 1 else [placed]
    return found


def _evaluate(ctx: LoopContext, stage: str, loaders: list[Any], limit_setting: int | float) -> list[Any]:
    """One evaluation run as Lightning's loop runs it: the loaders' batch counts, the first
    loader's iterator started (and read ahead where the count is unknown: trainer/fetching.py)
    before the stage's hooks (a 1.x module's after its epoch-start hook), the hooks and batches; with no batch to run (every count 0), no
    hook. Each loader's metric results, or its predictions for predict."""
    state, hooks = ctx.state, ctx.hooks
    limits = [_batch_limit(ctx, stage, loader, limit_setting) for loader in loaders]
    _record_batch_counts(ctx, stage, loaders, limits, limit_setting)
    owed = steps_owed(ctx, stage, limits)
    if sum(limits) == 0:  # Lightning's skipped loop: no hook; validate/test return [], predict None
        return []
    # Lightning gives every evaluation loader's sampler the fit's processed epochs as its epoch
    # (evaluation_loop / data_connector: "validation shuffling based on the training progress"): a
    # shuffled loader's distributed share after a 2-epoch fit is the permutation of epoch 2, not 0.
    for loader in loaders:
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(state.progress.epochs.current.processed)
    fetcher: Callable[[], Fetcher] | None = None
    if stage == "predict" or hooks.module_replaces(_STEP_HOOK[stage]):

        def open_batches() -> Fetcher:
            with _grad_mode(ctx):
                return sequential_fetcher(
                    loaders,
                    limits,
                    start=lambda loader: iter(profiled_iter(loader.batches(), ctx.profiler, FETCH_ACTION[stage])),
                )

        # 2.x: made now, before the start hook; 1.9.5: after the epoch-start hook (trainer/iterator_timing.py)
        fetcher = open_batches if makes_iterators_as_1_9(ctx) else _made(open_batches())
    state.set_batch_count(stage, limits[0])
    progress = state.progress.evaluation(stage, fitting=state.stage == "fit")
    if progress is not None:  # Lightning's loop resets its current count as a run starts
        progress.current, progress.max_batches = Counts(), list(limits)
    start, end = _START_END_HOOKS[stage]
    logged: list[StageResults] = []  # what this run logged: its metric objects are reset after `end`
    # Lightning's evaluation loops run whole under no_grad / inference_mode: the stage's start and end
    # hooks and on_*_model_eval/train too (a tensor made there has no graph)
    with _grad_mode(ctx), evaluation_mode(hooks, state.model, stage):
        state.log_collector.start_stage()  # what `start` and the epoch-start hook log: on epoch, published with
        state.log_collector.set_batch(start, None)  # what the epoch-end hooks log, as Lightning's
        # (a fit's validation runs while the training epoch's views are step views: not there, as in Lightning)
        state.log_collector.epoch_view = stage == "sanity_check" or (stage != "predict" and state.stage != "fit")
        hooks.call(start)
        results = (
            [{} for _ in loaders] if fetcher is None else _run_loop(ctx, stage, loaders, limits, fetcher, owed, logged)
        )
        state.log_collector.epoch_view = False
        if stage == "predict":
            state.predict_loop.end()
        hooks.call(end)
    reset_metric_objects(logged)  # as Lightning's reset_results after on_validation_end / on_test_end
    return results


def _with_val_limit(ctx: LoopContext, val_limit: Callable[[], int | float] | None) -> LoopContext:
    """``ctx`` counting validation batches with ``val_limit()`` (a 1.x fit after a finder's search
    validates as many batches as the search did: ``FitData.keep_val_loaders``)."""
    limit = ctx.settings.limit_val_batches if val_limit is None else val_limit()
    if limit == ctx.settings.limit_val_batches:
        return ctx
    return dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, limit_val_batches=limit))


def _made(fetcher: Fetcher) -> Callable[[], Fetcher]:
    return lambda: fetcher


def _record_batch_counts(
    ctx: LoopContext, stage: str, loaders: list[Any], limits: list[int | float], setting: int | float
) -> None:
    """Lightning's per-loader lists (trainer.num_val_batches, ...), kept by loop: the fit's
    validation (its sanity check counts without the sanity limit, as Lightning's ``_max_batches``);
    a loader of combined batches counts each loader it reads (Lightning's ``combined_loader.flattened``)."""
    state = ctx.state
    if stage == "sanity_check":
        setting = ctx.settings.limit_val_batches
        limits = [limited_count(loader, setting, "val") for loader in loaders]
    prefix = _PREFIXES.get(stage, stage)
    counts: list[int | float] = []
    for loader, limit in zip(loaders, limits, strict=True):
        inner = inner_loaders(loader)
        counts += [limit] if inner is None else [limited_count(each, setting, prefix) for each in inner]
    limits = counts
    fitting = stage == "sanity_check" or (stage == "validate" and state.stage == "fit")
    state.batch_counts["fit" if fitting else stage] = list(limits)


# The loaders' names in Lightning's messages (RunningStage.dataloader_prefix)
_PREFIXES = {"validate": "val", "sanity_check": "val"}


def _batch_limit(ctx: LoopContext, stage: str, loader: Any, limit_setting: int | float) -> int | float:
    limit = limited_count(loader, limit_setting, _PREFIXES.get(stage, stage))
    if stage == "sanity_check":  # a few validation batches, but never more than validation itself runs
        limit = min(limit, limited_count(loader, ctx.settings.limit_val_batches, "val"))
    return limit


def _grad_mode(ctx: LoopContext) -> AbstractContextManager[Any]:
    # Inside fit (its sanity check and validation) no_grad, as Lightning's fit-time validation loop
    # (inference_mode=False): what validation creates (a pruning mask, a cached tensor) may join training.
    inference = ctx.inference_mode and ctx.runtime.capabilities.inference_mode and ctx.state.stage != "fit"
    return torch.inference_mode() if inference else torch.no_grad()


def _run_loop(
    ctx: LoopContext,
    stage: str,
    loaders: list[Any],
    limits: list[int | float],
    fetcher: Callable[[], Fetcher],
    owed: int,
    logged: list[StageResults],
) -> list[Any]:
    """Run ``stage`` over ``fetcher``'s batches; metrics per loader (or predictions for predict).
    The results logged into (each loader's, the epoch-end hooks') are added to ``logged``."""
    state, hooks = ctx.state, ctx.hooks
    step_hook = _STEP_HOOK[stage]
    require_dataloader_idx(state.module, stage, len(loaders))
    extra_index = len(loaders) > 1 and _accepts_dataloader_idx(getattr(state.module, step_hook))
    with _grad_mode(ctx):
        opening = state.log_collector.results
        state.log_collector.set_batch(_EPOCH_START_HOOK[stage], None)
        hooks.call(_EPOCH_START_HOOK[stage])
        outputs_hook = _OUTPUTS_HOOK.get(stage)
        keeps_outputs = outputs_hook is not None and hooks.module_overrides(outputs_hook)
        per_loader = LoaderResults(ctx, stage, limits, keeps_outputs=keeps_outputs)
        logged_before_batches = {id(entry) for entry in opening.entries.values()}  # the start hooks'
        _run_batches(ctx, stage, loaders, fetcher(), per_loader, extra_index, owed)
        results, kept = per_loader.results, per_loader.kept
        if stage == "predict":
            state.predict_loop.finish(results)
            state.log_collector.set_batch(_EPOCH_END_HOOK[stage], None)
            hooks.call(_EPOCH_END_HOOK[stage], results)  # 1.x's hook takes them (hook_arguments.py), 2.x's does not
            return results
        # As in Lightning, the epoch's values of what the steps logged are in callback_metrics
        # when on_*_epoch_end runs; what the epoch-end hooks log is published after them.
        reduced = reduce_and_show(ctx, stage, results, opening)
        if outputs_hook is not None and keeps_outputs:
            # 1.x's validation_epoch_end(outputs) logs into the epoch-end hooks' results, as 1.9 keeps
            # its values apart from the steps' (a name the steps logged too is a second metric, not
            # one more sample of the steps' mean)
            state.log_collector.set_batch(outputs_hook, None)
            hooks.call_module(outputs_hook, kept[0] if len(kept) == 1 else kept)
        state.log_collector.set_batch(_EPOCH_END_HOOK[stage], None)
        logged_before = len(state.log_collector.results.entries)
        hooks.call_callbacks(_EPOCH_END_HOOK[stage])
        ctx.publisher.callbacks_logs(logged_before)
        hooks.call_module(_EPOCH_END_HOOK[stage])
        logged += [*results, state.log_collector.results]
        shown = shows_loaders(stage, results)
        published = publish_epoch(ctx, reduced, state.log_collector.epoch_metrics(), logged_before_batches, shown=shown)
        # Lightning's loop stores a loader's results as the batches move on to another loader, and
        # once at the end: loader 0's always, another's only where it gave a batch
        return [values for index, values in enumerate(published) if index == 0 or index in per_loader.reached]


def _run_batches(
    ctx: LoopContext,
    stage: str,
    loaders: list[Any],
    fetcher: Fetcher,
    per_loader: LoaderResults,
    extra_index: bool,
    owed: int,
) -> None:
    """Each of ``fetcher``'s batches through the stage's step and batch hooks, taken to the device
    as the loop takes it (with its own loader's batch-transfer hooks); then the last batch's step
    ``owed`` times more, alone (evaluation_shares.steps_owed). As the batches move on to another
    loader, the finished loaders' epoch values are shown (``show_finished_loaders``)."""
    state, log_collector, hooks, runtime = ctx.state, ctx.state.log_collector, ctx.hooks, ctx.runtime
    step_hook, batch_start, batch_end = _STEP_HOOK[stage], _BATCH_START_HOOK[stage], _BATCH_END_HOOK[stage]
    calls_batch_start = hooks.overridden(batch_start)
    step_end = _STEP_END_HOOK.get(stage)
    step_hooks = StepHooks(
        step_end=None if step_end is None else hooks.step_end(step_end),
        chunk_scope=log_collector.chunk_scope,
        call=hooks.step_caller(step_hook),  # a step hook taking fewer arguments: those it accepts
    )
    eval_step = profiled_call(runtime.eval_step, ctx.profiler, strategy_action(runtime, step_hook))
    transfers = [loader.batch_transfer() for loader in loaders]
    several = len(loaders) > 1
    # trainer.validate_loop's / test_loop's / the fit's val_loop's batch_progress, advanced as Lightning's
    progress = state.progress.evaluation(stage, fitting=state.stage == "fit") or Progress()
    last_loader, last_batch = len(loaders) - 1, per_loader.limits[-1] - 1
    current_loader = 0
    for batch, batch_idx, loader_idx in fetcher:
        per_loader.reach(loader_idx)
        if loader_idx != current_loader:
            current_loader = loader_idx
            show_finished_loaders(ctx, stage, per_loader.results)
        transfer = transfers[loader_idx]
        if transfer is not None:
            batch = transfer(batch)
        extra = (loader_idx,) if extra_index else ()
        hook_extra = (loader_idx,) if several else ()  # dataloader_idx where there are several (as in Lightning)
        log_collector.set_batch(step_hook, batch)
        if stage == "predict":
            state.predict_loop.record(loaders[loader_idx], batch_idx, loader_idx)
        # Lightning's is_last_batch, from the fetch on: nothing after this batch (unknown for an unsized loader)
        progress.is_last_batch = loader_idx == last_loader and batch_idx == last_batch
        progress.ready()
        if calls_batch_start:
            hooks.call(batch_start, batch, batch_idx, *hook_extra)
        progress.started()
        output = eval_step(state.model, step_hook, batch, batch_idx, *extra, hooks=step_hooks)
        progress.processed()
        per_loader.add(output)
        hooks.call(batch_end, output, batch, batch_idx, *hook_extra)
        if stage != "predict":
            ctx.publisher.evaluation_step(step_counter(ctx, stage), loader_idx, loader_suffix(loader_idx, loaders))
        progress.completed()
        runtime.supervision.step_done()
    for _ in range(owed):  # as many collectives as the ranks that ran more steps: no hook, output dropped
        eval_step(state.model, step_hook, batch, batch_idx, *extra, hooks=step_hooks)
    per_loader.close()


def _accepts_dataloader_idx(step: Any) -> bool:
    try:
        parameters = inspect.signature(step).parameters.values()
    except (TypeError, ValueError):
        return False
    # ``validation_step(self, *args)`` gets it too, as Lightning passes it to every step where there are several
    return len(parameters) >= 3 or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
