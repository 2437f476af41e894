"""What a trained batch makes due, as Lightning's training epoch loop decides after each batch
(``_should_check_val_fx``, ``_should_check_val_epoch``'s interval; when a stop asked may end the
epoch: stop_limits.py): its metrics to the loggers, validation, the plateau schedulers it made due,
and whether the epoch ends there. Read by the batch loop (training_batches.py) after each batch."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from trainmesh.trainer import evaluation
from trainmesh.trainer.epoch_end import step_due_plateau_schedulers
from trainmesh.trainer.finite_loss import verify_deferred_losses
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.results import StageResults
from trainmesh.trainer.stop_limits import can_stop_early, min_met
from trainmesh.trainer.val_clock import BY_TIME
from trainmesh.utilities.exceptions import MisconfiguredValue

if TYPE_CHECKING:
    from trainmesh.trainer.fit_data import FitData
    from trainmesh.trainer.loop_state import LoopPosition, LoopState
    from trainmesh.trainer.settings import LoopSettings


def validates_after(
    state: LoopState,
    settings: LoopSettings,
    loop: LoopPosition,
    val_every: int | float,
    runtime: Any,
    *,
    is_last: bool,
) -> bool:
    """Whether validation runs after the batch just trained, after its on_train_batch_end, as
    Lightning's ``_should_check_val_fx``: every ``val_every`` batches of the epoch (of the fit, all
    epochs counted, where ``check_val_every_n_epoch=None``; not at an epoch's end that is not one of
    them, nor where max_steps stops), after the last batch of a loader without a length, and where
    a stop was asked (``should_stop``) once ``min_epochs`` are done. A time-based interval
    (``BY_TIME``): where the clock says so, rank 0's on every rank (val_clock.py)."""
    if val_every == BY_TIME:  # Lightning's order: a stop asked, then the clock (val_clock.py)
        return (
            state.should_stop
            and min_met(state, settings)
            or state.val_clock is not None
            and state.val_clock.due(runtime)
        )
    done = loop.total_batches if settings.check_val_every_n_epoch is None else loop.batches_done
    if done % val_every == 0 or is_last and val_every == math.inf:
        return True
    return state.should_stop and min_met(state, settings)


def val_check_batches(state: LoopState, settings: LoopSettings, fit_data: FitData) -> int | float | None:
    """How many training batches between validations this epoch; None when none is due; ``BY_TIME``
    for a time-based interval (also of an iterable stream, as Lightning's)."""
    if not fit_data.validates_in_epoch(state.current_epoch):
        return None
    if settings.val_check_time is not None:
        return BY_TIME
    limit = state.num_training_batches
    interval = settings.val_check_interval
    if isinstance(interval, int):
        return interval
    if limit == math.inf:
        if interval != 1.0:
            raise MisconfiguredValue(  # Lightning's class and words (still a ValueError, as before)
                "When using an IterableDataset for `train_dataloader`, `Trainer(val_check_interval)` must be time "
                "based, `1.0` or an int. An int k specifies checking validation every k training batches."
            )
        return math.inf  # unknown length: validate once, at the end of the epoch
    return max(1, int(limit * interval))


def log_and_validate(
    ctx: LoopContext,
    fit_data: FitData,
    val_every: int | float | None,
    train_results: StageResults,
    *,
    log_due: bool,
    stepped: bool,
    is_last: bool,
) -> None:
    """After a batch's on_train_batch_end: its metrics to the loggers when due (``log_due``), then
    validation when due, then the schedulers stepped with a metric that the batch made due."""
    state, settings, loop = ctx.state, ctx.settings, ctx.state.loop
    if log_due:
        verify_deferred_losses(loop.loss_check)  # where the check is deferred (finite_loss.py), its read
        ctx.publisher.step_metrics()
    if val_every is not None and validates_after(state, settings, loop, val_every, ctx.runtime, is_last=is_last):
        verify_deferred_losses(loop.loss_check)
        loop.mid_epoch_validation, loop.stepped_pending = not is_last, int(stepped)
        loop.epoch_end_validation = is_last
        try:
            # gradients are released first where none wait for an optimizer step
            evaluation.run_validation(ctx, fit_data.val_loaders, release_grads=stepped, val_limit=fit_data.val_limit)
        finally:
            loop.mid_epoch_validation, loop.stepped_pending = False, 0
            loop.epoch_end_validation = False
        state.log_collector.start_stage(train_results)
    if loop.plateau_due:  # Lightning's order: after on_train_batch_end and the validation, which may log their metric
        step_due_plateau_schedulers(state, ctx.hooks)


def stop_after_batch(ctx: LoopContext, *, is_last: bool) -> bool | None:
    """Whether the epoch ends after this batch: max_steps reached (True when batches of the epoch
    are left: right after an optimizer step, so no gradients are pending), or a stop asked that
    may end it now (False); None to go on."""
    state, max_steps = ctx.state, ctx.settings.max_steps
    if max_steps != -1 and state.global_step >= max_steps:
        return not is_last
    if state.should_stop and can_stop_early(ctx):
        return False
    return None
