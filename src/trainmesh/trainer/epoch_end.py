"""The end of a training epoch (``end_epoch``, which the fit loop calls): ``on_train_epoch_end`` in
Lightning's order, with the epoch's metrics and its epoch-interval schedulers between the hooks, and
the position a checkpoint resumes from where max_steps ended the fit inside the epoch."""

from __future__ import annotations

from typing import Any

from trainmesh.seed import capture_rng_state
from trainmesh.trainer.finite_loss import verify_deferred_losses
from trainmesh.trainer.hooks import HookDispatcher
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.loop_state import LoopState, StoppedInsideEpoch
from trainmesh.trainer.optimization.runners import epoch_scheduler_due
from trainmesh.trainer.optimizers import step_scheduler
from trainmesh.trainer.publishing import callback_metrics, keep_step_views, logger_row
from trainmesh.trainer.results import StageResults, reset_metric_objects
from trainmesh.utilities.exceptions import MisconfigurationException


def end_epoch(ctx: LoopContext, train_results: StageResults, *, cut_short: bool) -> None:
    """The end of an epoch: epoch-end hooks, epoch metrics, epoch schedulers (its validation
    ran after its last batch, where that batch was one to validate after: ``validates_after``).

    ``cut_short``: max_steps ended the fit before the epoch's last batch, so the run ends but
    the epoch does not. What reports on the run still happens, as at any epoch end (and as in
    Lightning, which does not validate there unless the batch was one to validate after):
    training_epoch_end with the outputs so far, on_train_epoch_end, the epoch means over the
    batches trained, current_epoch advancing, so the loggers get the last steps and
    ModelCheckpoint(save_last=True) writes them. What would change how training goes on does
    not: epoch-interval schedulers do not step, and the position is recorded first
    (``StoppedInsideEpoch``), so a checkpoint resumes the epoch where training stopped, with that
    moment's generators, accumulators and outputs, and the resumed run reports the whole epoch at
    its real end. (Callbacks acting on epoch-end values, EarlyStopping, see the partial epoch once
    in the stopped run.)
    """
    state = ctx.state
    loop = state.loop
    verify_deferred_losses(loop.loss_check)  # before the epoch's checkpoints
    if cut_short:
        loop.stopped_inside = StoppedInsideEpoch(
            epoch=state.current_epoch,
            batches_done=loop.batches_done,
            rng=capture_rng_state(),
            train_results=_copied_results(train_results),
            epoch_outputs=list(loop.epoch_outputs),
        )
    if loop.plateau_due:  # made due by a window the epoch's end stepped (an epoch ended inside it)
        step_due_plateau_schedulers(state, ctx.hooks)
    # An epoch whose end a resume runs (loop.epoch_end_due), or the first a restart trains (loop.plateau_held),
    # steps no plateau scheduler, as Lightning's restart
    run_epoch_end_hooks(ctx, train_results, cut_short=cut_short or loop.epoch_end_due or loop.plateau_held)
    loop.epoch_end_due = loop.plateau_held = False
    state.current_epoch += 1
    state.progress.epochs.completed()
    loop.epoch_finished = loop.epoch_ending = False
    loop.batches_done = 0


def _copied_results(results: Any) -> dict[str, Any]:
    state: dict[str, Any] = results.state_dict()
    for entry in state.values():
        if entry["total"] is not None:
            entry["total"] = entry["total"].clone()  # accumulated in place by later self.log calls
    return state


def run_epoch_end_hooks(ctx: LoopContext, train_results: StageResults, *, cut_short: bool) -> None:
    """``on_train_epoch_end`` in Lightning 2.x's order: the callbacks, the module, then the
    monitoring callbacks (ModelCheckpoint, EarlyStopping), with the epoch's metrics and schedulers.

    As in Lightning, the epoch values of what training logged exist before any of these hooks, so
    each of them reads them in ``callback_metrics``; what the hooks log is published before the
    monitoring callbacks decide, and the loggers get both in one call. The epoch-interval
    schedulers stepped with a metric (ReduceLROnPlateau) step after every hook, the monitoring
    callbacks' included, as Lightning's fit loop steps them: a checkpoint taken in any of these
    hooks (``loop.epoch_ending``) holds them before that step, and resumes with the next epoch
    without it, as Lightning's restart does (the metric is not in the checkpoint).
    """
    state, hooks = ctx.state, ctx.hooks
    loop, log_collector = state.loop, state.log_collector
    state.progress.epochs.processed()  # Lightning's, before its epoch-end hooks
    log_collector.start_stage(train_results)
    if hooks.module_overrides("training_epoch_end"):  # Lightning 1.x's, before on_train_epoch_end
        log_collector.set_batch("training_epoch_end", None)
        if hooks.call_module("training_epoch_end", loop.epoch_outputs) is not None:
            # 1.9.5's check (its fit loop): a 0.x-style `return {"log": ...}` would be dropped silently
            raise MisconfigurationException(
                "`training_epoch_end` expects a return of None. "
                "HINT: remove the return statement in `training_epoch_end`."
            )
    loop.epoch_outputs = []
    trained = log_collector.epoch_metrics()
    ctx.publisher.epoch_metrics(trained, to_logger=False)
    loop.epoch_ending = True  # callback_metrics shows these epoch values now, not the last step's
    log_collector.start_stage()  # what the hooks log, published once they have run
    log_collector.set_batch("on_train_epoch_end", None)
    hooks.call_callbacks("on_train_epoch_end", monitoring=False)
    ctx.publisher.callbacks_logs(0)
    hooks.call_module("on_train_epoch_end")
    logged = [train_results, log_collector.results]
    # At the epoch's last logged step, as Lightning's (its _batches_that_stepped less one)
    # One row at the epoch's last logged step, as Lightning's (its _batches_that_stepped less one): the
    # steps' epoch values and the hooks' (a name both logged: each under its own key, the hooks' value last)
    ended = log_collector.epoch_metrics()
    ctx.publisher.epoch_metrics(ended, to_logger=False)
    ctx.publisher.log({**logger_row(trained), **logger_row(ended)}, stepped=loop.batches_stepped - 1)
    log_collector.start_stage(train_results)
    hooks.call_callbacks("on_train_epoch_end", monitoring=True)
    step_epoch_schedulers(state, hooks, cut_short=cut_short, plateau=True)
    loop.epoch_finished = True
    keep_step_views(state)  # for the next epoch's start, as Lightning's views keep them
    reset_metric_objects(logged)  # after every on_train_epoch_end, as Lightning's update_train_epoch_metrics


def step_epoch_schedulers(state: LoopState, hooks: HookDispatcher, *, cut_short: bool, plateau: bool) -> None:
    """The epoch-interval schedulers due now, through the module's ``lr_scheduler_step`` where it
    overrides it (manual optimization: the module steps them itself). As Lightning's, those stepped
    with a metric (``plateau``) step after on_train_epoch_end, which may log it; the others at the
    epoch's last batch, before its on_train_batch_end and validation (the fit loop)."""
    custom = hooks.module_hook("lr_scheduler_step") if hooks.module_overrides("lr_scheduler_step") else None
    for config in state.lr_scheduler_configs if state.manual_backward is None else []:
        if config.reduce_on_plateau != plateau or cut_short:
            continue
        if config.interval == "epoch" and (state.current_epoch + 1) % config.frequency == 0:
            if epoch_scheduler_due(state, config.scheduler):  # Lightning 1.x's optimizer frequencies
                step_scheduler(config, callback_metrics(state), custom, counted=state.progress.schedulers)


def end_epoch_at_batch_start(state: LoopState, hooks: HookDispatcher, batch_idx: int) -> None:
    """``on_train_batch_start`` returned -1 at ``batch_idx``: as Lightning's loop, that batch is the
    epoch's last (``trainer.is_last_batch``, counted processed but not trained, no
    ``on_train_batch_end``, no validation after it), and the schedulers step as at an epoch's last
    batch: the epoch-interval ones, and the step-interval ones due at this batch (Lightning steps
    those too, though no optimizer step ran)."""
    state.is_last_batch = True
    state.progress.train_batches.processed()
    if state.manual_backward is not None:  # manual optimization: the module steps its schedulers
        return
    custom = hooks.module_hook("lr_scheduler_step") if hooks.module_overrides("lr_scheduler_step") else None
    for config in state.lr_scheduler_configs:
        if not config.reduce_on_plateau and config.interval == "step" and (batch_idx + 1) % config.frequency == 0:
            step_scheduler(config, callback_metrics(state), custom, counted=state.progress.schedulers)
    step_epoch_schedulers(state, hooks, cut_short=False, plateau=False)


def step_due_plateau_schedulers(state: LoopState, hooks: HookDispatcher) -> None:
    """The step-interval schedulers stepped with a metric that the last batch made due, as Lightning's
    ``update_lr_schedulers("step", update_plateau_schedulers=True)``: after the batch's
    on_train_batch_end and its validation, so that they watch what those logged."""
    custom = hooks.module_hook("lr_scheduler_step") if hooks.module_overrides("lr_scheduler_step") else None
    due, state.loop.plateau_due = state.loop.plateau_due, []
    for config in due:
        step_scheduler(config, callback_metrics(state), custom, counted=state.progress.schedulers)
