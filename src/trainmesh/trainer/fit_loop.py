"""The fit loop: epochs of training batches, optimizer steps, validation cadence.

Resuming is exact: a checkpoint records where in the epoch it was taken and every RNG state,
and the resumed run replays the epoch's data order before continuing (see ``_open_epoch``).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from trainmesh.seed import capture_rng_state, restore_rng_state
from trainmesh.trainer import evaluation
from trainmesh.trainer.combined_loaders import refuse_sequential_training
from trainmesh.trainer.epoch_end import (
    run_epoch_end_hooks,
    step_due_plateau_schedulers,
    step_epoch_schedulers,
)
from trainmesh.trainer.fetching import Fetcher
from trainmesh.trainer.fit_cadence import val_check_batches, validates_after
from trainmesh.trainer.fit_data import FitData
from trainmesh.trainer.fit_start import begin_fit
from trainmesh.trainer.hooks import TrainBatchHooks
from trainmesh.trainer.iterator_timing import makes_iterators_as_1_9
from trainmesh.trainer.loader_states import load_loader_states, states_to_load
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.loop_progress import Counts
from trainmesh.trainer.loop_state import LoopPosition, LoopState, StoppedInsideEpoch
from trainmesh.trainer.model_mode import warn_of_modules_in_eval_mode
from trainmesh.trainer.optimization import runners
from trainmesh.trainer.optimization.closure import batch_end_outputs, epoch_end_output
from trainmesh.trainer.profiling import FETCH_ACTION, profiled_call
from trainmesh.trainer.restart_counts import apply_epoch_loop_start, start_epoch_loop, warn_if_loader_not_resumable
from trainmesh.trainer.results import LogCollector, StageResults
from trainmesh.trainer.run_summary import announce_run
from trainmesh.trainer.settings import warn_if_max_epochs_unset
from trainmesh.trainer.stop_limits import can_stop_early, fit_done, fit_limits
from trainmesh.trainer.train_batch_start import END_OF_EPOCH, BatchStart
from trainmesh.trainer.val_clock import BY_TIME, ValClock
from trainmesh.utilities.dataloaders import begin_skip
from trainmesh.utilities.rank_zero import rank_zero_info, rank_zero_warn
from trainmesh.utilities.warnings import PossibleUserWarning


def run_fit(ctx: LoopContext, checkpoint: dict[str, Any] | None, source: str) -> None:
    fit_data = ctx.state.fit_data
    assert fit_data is not None, "stage_setup.prepare_stage made the fit's FitData"
    warn_if_max_epochs_unset(ctx.settings)
    resume_rng, checkpoint = begin_fit(ctx, fit_data, checkpoint, source, train)
    # Lightning's file, or a named resume (as Lightning's): the loaders' saved states (loader_states.py)
    if checkpoint is not None and ("loop" not in checkpoint or (ctx.state.named_resume and "loops" in checkpoint)):
        ctx.state.loop.loader_states = states_to_load(checkpoint, iteration_based=ctx.settings.max_steps != -1)
    # Lightning's anomaly mode covers its fit loop: from the train loader to on_train_end; its grad mode too
    with torch.autograd.set_detect_anomaly(ctx.detect_anomaly), torch.enable_grad():
        train(ctx, fit_data, resume_rng)
    ctx.hooks.call("on_fit_end")


def train(ctx: LoopContext, fit_data: FitData, resume_rng: dict[str, Any] | None) -> None:
    state, runtime, settings, hooks = ctx.state, ctx.runtime, ctx.settings, ctx.hooks
    # Lightning's order (trainer/fit_data.py): the train loader after the sanity check, its first
    # epoch's iterator started (and read ahead where it has no length), then the validation loaders.
    train_loader = fit_data.train_loader()
    if train_loader is None or state.num_training_batches == 0:
        # As Lightning: no training, no on_train_start/end (nor a loader asked for with a limit of 0)
        rank_zero_warn("the train dataloader is empty (or limit_train_batches=0): no training step ran")
        if settings.limit_train_batches != 0:  # Lightning's words where the loader has no batch (its done)
            rank_zero_info("`Trainer.fit` stopped: No training batches.")
        return
    _warn_of_unlogged_epochs(ctx, state.num_training_batches)
    state.val_clock = ValClock.for_setting(settings.val_check_time)  # as Lightning's setup_data
    load_loader_states(train_loader, state.loop.loader_states)  # before its iterator starts, as Lightning's
    state.loop.loader_states = []
    announce_run(ctx.view, state, runtime, "fit", train_loader, accumulation=settings.accumulate_grad_batches)
    opened: _OpenedEpoch | None = _first_epoch(ctx, train_loader, resume_rng, fit_data.take_started_epoch())
    if opened is None:  # resumed with nothing left to train: as Lightning's, no on_train_start/end
        return
    if fit_data.validates_in_epoch(state.current_epoch) and not fit_data.has_val_loaders:
        fit_data.val_loaders()
    warn_of_modules_in_eval_mode(state.module)
    if not opened.mid_epoch_resume:  # what on_train_start logs is the first epoch's (Lightning's), on epoch
        state.log_collector.start_stage()
    state.log_collector.set_batch("on_train_start", None)
    state.log_collector.epoch_view = True  # until the first batch, as Lightning's views (results.py)
    hooks.call("on_train_start")
    with ctx.runtime.supervision.watching(processes=ctx.runtime.world_size):  # supervision/watchdog.py
        try:
            run_epoch = profiled_call(_run_epoch, ctx.profiler, "run_training_epoch")
            while not fit_done(state, fit_limits(ctx), say=True):
                if opened is None and fit_data.train_reload_due():  # reload_dataloaders_every_n_epochs
                    train_loader = fit_data.train_loader(reload=True)
                    # Lightning's setup_data warns again for each reloaded loader's count
                    _warn_of_unlogged_epochs(ctx, state.num_training_batches)
                    state.val_clock = ValClock.for_setting(settings.val_check_time)  # again (setup_data)
                run_epoch(ctx, fit_data, train_loader, opened)
                opened = None
        finally:
            state.loop.last_loss = None
    state.loop.plateau_held = False  # Lightning's fit loop stops restarting before on_train_end
    hooks.call("on_train_end")


def _warn_of_unlogged_epochs(ctx: LoopContext, num_batches: int | float) -> None:
    """As Lightning: an epoch shorter than ``log_every_n_steps`` never reaches the loggers' step
    rows (``train_loss`` missing from metrics.csv), which looks like a logging bug unless said. In
    Lightning's words, which programs' ``warnings.filterwarnings(message=...)`` match."""
    interval = ctx.settings.log_every_n_steps
    if ctx.publisher.loggers and num_batches < interval and not ctx.settings.fast_dev_run:
        rank_zero_warn(
            f"The number of training batches ({num_batches}) is smaller than the logging interval"
            f" Trainer(log_every_n_steps={interval}). Set a lower value for log_every_n_steps if"
            " you want to see logs for the training epoch.",
            category=PossibleUserWarning,
        )


@dataclass
class _OpenedEpoch:
    """The first epoch of a fit, its iterator started before ``on_train_start`` (Lightning's order);
    ``batches`` None: started after ``on_train_epoch_start`` instead, as 1.9.5's (trainer/iterator_timing.py)."""

    batches: Fetcher | None
    mid_epoch_resume: bool  # a resumed epoch: its epoch-start hooks ran in the interrupted run
    # Resumed from a save in the previous epoch's last on_train_batch_end: Lightning's restart holds that
    # epoch done (no epoch-end hooks, no validation) and starts this one without its epoch-start hooks.
    after_last_batch: bool = False


def _first_epoch(
    ctx: LoopContext, loader: Any, resume_rng: dict[str, Any] | None, started: tuple[dict[str, Any], Fetcher] | None
) -> _OpenedEpoch | None:
    """Start the fit's first epoch's data; None where nothing is left to train (a resumed fit).
    ``started``: the iterator a finder's search started (``FitData.start_first_epoch``), read here as
    Lightning's fit reads it, unless the fit resumes (its epoch is replayed from the checkpoint)."""
    state, loop = ctx.state, ctx.state.loop
    if resume_rng is not None:
        started = None
    if resume_rng is not None and loop.epoch_finished and not fit_done(state, fit_limits(ctx)):
        # The checkpoint was taken after this epoch's end-of-epoch work, or during its
        # on_train_epoch_end hooks (its plateau step then is not taken, as in Lightning's restart): go on with the next.
        state.current_epoch += 1
        loop.epoch_finished, loop.batches_done = False, 0
        restore_rng_state(resume_rng)
        resume_rng = None
    # ... unless the fit is done already (max_steps reached there): Lightning's fit loop skips its run, reset included
    after_last_batch = (
        resume_rng is not None and _saved_after_last_batch(state) and not fit_done(state, fit_limits(ctx))
    )
    if resume_rng is not None and after_last_batch:
        # Lightning's fit_loop.reset (restarted on train batch end, mid-epoch, is_last_batch): the saved
        # epoch is processed and completed without its end; the fit goes on with the next epoch.
        state.progress.epochs.processed()
        state.progress.epochs.completed()
        state.current_epoch += 1
        loop.batches_done = 0
        restore_rng_state(resume_rng)
        resume_rng = None
    # (after the saved epoch's last batch, Lightning's fit is not done as it starts: its on_train_start/end run)
    if not after_last_batch and fit_done(state, fit_limits(ctx), say=True):
        if resume_rng is not None:
            # Resumed with nothing left to train: still hold the generators the checkpoint
            # held, for a checkpoint saved now.
            restore_rng_state(resume_rng)
        return None
    epochs = state.progress.epochs.total
    if fit_limits(ctx).max_steps == -1:  # a resumed epoch-end save's epoch: Lightning completes it as it goes on
        epochs.completed = epochs.processed  # (not under max_steps: its iteration-based on_run_start)
    # A checkpoint taken at an epoch's start (batches_done 0: the one Trainer.save_checkpoint
    # writes after fit, say) starts that epoch afresh: its accumulators are the previous epoch's.
    mid_epoch_resume = resume_rng is not None and loop.batches_done > 0
    if started is not None:
        loop.epoch_start_rng, batches = started
        loop.batches_done = 0
        loader.set_epoch(state.current_epoch)  # after the iterator is made, as Lightning's on_advance_start
        return _OpenedEpoch(batches, mid_epoch_resume, after_last_batch)
    if resume_rng is None and makes_iterators_as_1_9(ctx):
        return _OpenedEpoch(None, mid_epoch_resume, after_last_batch)
    return _OpenedEpoch(_open_epoch(state, loader, resume_rng), mid_epoch_resume, after_last_batch)


def _saved_after_last_batch(state: LoopState) -> bool:
    """The checkpoint was saved in on_train_batch_end of its epoch's last batch (every batch trained,
    the epoch's end not begun, nor due: ``epoch_end_due`` is a save in the validation after it)."""
    loop, count = state.loop, state.num_training_batches
    return (
        not loop.epoch_finished
        and not loop.epoch_end_due
        and not loop.epoch_not_started  # Lightning's restarted epoch loop: an empty epoch, its end run
        and loop.batches_done > 0
        and count != float("inf")
        and loop.batches_done >= count
    )


def _open_epoch(state: LoopState, loader: Any, resume_rng: dict[str, Any] | None) -> Fetcher:
    """Start the epoch's data iterator, replaying the interrupted epoch when resuming.

    A shuffling sampler draws its order from the global RNG when its iterator starts, so a
    resume restores the RNG as it was at the epoch's start, starts the iterator (skipping the
    batches already trained on, by index only), and then restores the RNG as it was when the
    checkpoint was taken. The batches are read as Lightning reads them (trainer/fetching.py).
    """
    loop, count = state.loop, state.num_training_batches
    loader.set_epoch(state.current_epoch)
    skip = loop.batches_done if resume_rng is not None else 0
    if resume_rng is not None and loop.epoch_start_rng is not None and skip > 0:
        restore_rng_state(loop.epoch_start_rng)
        skipping = loader.skipping(skip)
        iterator = skipping.batches()
        begin_skip(skipping.loader)
        restore_rng_state(resume_rng)
        return Fetcher(iterator, count, fetched=skip)
    if resume_rng is not None:
        restore_rng_state(resume_rng)
    if skip > 0:  # Lightning's checkpoint (no generators saved): its resume reads the loader afresh, counting on
        return Fetcher(loader.batches(), count, fetched=skip)
    loop.epoch_start_rng = capture_rng_state()
    loop.batches_done = 0
    return Fetcher(loader.batches(), count)


def _run_epoch(ctx: LoopContext, fit_data: FitData, loader: Any, opened: _OpenedEpoch | None) -> None:
    """One epoch; ``opened``: the fit's first, its data started already."""
    state, hooks, log_collector = ctx.state, ctx.hooks, ctx.state.log_collector
    mid_epoch_resume = opened is not None and opened.mid_epoch_resume
    if opened is None:  # the first: started with on_train_start's logs, or a resumed epoch's restored accumulators
        log_collector.start_stage()
    else:  # a resumed fit's counts as Lightning's epoch loop resets them (restart_counts.py)
        apply_epoch_loop_start(state)
    train_results = log_collector.results
    state.train_results = train_results
    progress = state.progress
    # Lightning's restart skips these (_first_epoch), unless the epoch is not started in its counts
    starts = not mid_epoch_resume and (opened is None or not opened.after_last_batch)
    if starts or state.loop.epoch_not_started:
        state.loop.epoch_not_started = False
        progress.epochs.ready()
        log_collector.set_batch("on_train_epoch_start", None)  # what it logs defaults to on_epoch (Lightning's)
        log_collector.epoch_view = True  # until the first batch, as Lightning's views (results.py)
        hooks.call("on_train_epoch_start")
        progress.epochs.started()
        refuse_sequential_training(loader)
    if not mid_epoch_resume:
        # Lightning's epoch loop resets as it starts, after on_train_epoch_start: the epoch's batch
        # counts, and the validation batches counted across the epoch
        progress.train_batches.current, progress.fit_validation.total = Counts(), Counts()
        progress.schedulers.current = Counts()
        progress.epoch_steps, progress.zero_grads.current = 0, Counts()  # its optimizer progress too
        state.is_last_batch = False  # Lightning's batch progress resets as the epoch's loop starts
    # A later epoch's iterator starts after on_train_epoch_start, as Lightning's
    batches = opened.batches if opened is not None and opened.batches is not None else _open_epoch(state, loader, None)
    val_every = val_check_batches(state, ctx.settings, fit_data)
    if opened is not None:
        warn_if_loader_not_resumable(state, ctx.settings, loader)
        start_epoch_loop(state, ctx.settings, None if val_every == BY_TIME else val_every)  # (clock just started)
    if opened is not None and not mid_epoch_resume and fit_data.validates_first(val_every):
        # Lightning 1.x's trainer.tune searches validate before their first batch (fit_data.py)
        evaluation.run_validation(ctx, fit_data.val_loaders, release_grads=False)
        state.log_collector.start_stage(train_results)
    cut_short = _train_batches(ctx, fit_data, loader.batch_transfer(), batches, val_every, train_results)
    _end_epoch(ctx, train_results, cut_short=cut_short)


def _train_batches(
    ctx: LoopContext,
    fit_data: FitData,
    transfer: Callable[[Any], Any] | None,
    fetcher: Fetcher,
    val_every: int | float | None,
    train_results: StageResults,
) -> bool:
    """Train the epoch's batches from where it stands (``loop.batches_done``), each taken to the
    device by ``transfer``; True when max_steps stopped it before its last batch."""
    state, settings, hooks, runtime = ctx.state, ctx.settings, ctx.hooks, ctx.runtime
    loop, log_collector = state.loop, state.log_collector
    # The Trainer's, read now: a callback may change it at the epoch's start (GradientAccumulationScheduler)
    accumulate, supervision = ctx.view.accumulate_grad_batches, runtime.supervision
    # Read once: called on every step (each lookup or wrapper would be a Python call per step).
    step_done, stop_agreed = supervision.step_done, supervision.stop_agreed
    log_every = settings.log_every_n_steps
    shares_metrics = log_collector.metrics_source is not None  # only some ranks log (pipeline): end_step shares
    batch_hooks = TrainBatchHooks(hooks)
    at_batch_end = batch_hooks.end_calls  # read once: the step's fast path
    start = loop.batches_done
    # Resuming inside an accumulation window; not at the epoch's end (its last batch stepped the window)
    pending_gradients = start % accumulate != 0 and start < state.num_training_batches
    # The training step, and the optimizer step through Lightning's hooks (who overrides which is read here)
    batches = runners.choose_runner(ctx, accumulate)
    run_batch = profiled_call(batches.run, ctx.profiler, "run_training_batch")
    start_batch = BatchStart(state, batch_hooks, batches, run_batch)  # None batches, on_train_batch_start, run_batch
    manual = batches.manual  # the module steps its optimizers itself
    keep_outputs = hooks.module_overrides("training_epoch_end")
    cut_short = False
    next_batch = profiled_call(functools.partial(next, fetcher, _EXHAUSTED), ctx.profiler, FETCH_ACTION["fit"])
    progress = state.progress.train_batches  # trainer.fit_loop.epoch_loop.batch_progress, advanced as Lightning's
    for batch_idx, batch, is_last in _timed_fetches(fetcher, next_batch, transfer, start, state):
        steps_now = (batch_idx + 1) % accumulate == 0 or is_last
        if (output := start_batch(batch, batch_idx, steps_now=steps_now)) is END_OF_EPOCH:
            break  # the module asked to end the epoch here
        progress.processed()
        if shares_metrics:  # where only some ranks computed the loss (pipeline), every rank now has their values
            log_collector.end_step()
        if keep_outputs and (kept := epoch_end_output(output, manual=manual, accumulate=accumulate)) is not None:
            loop.epoch_outputs.append(kept)  # training_epoch_end's (Lightning 1.x's, closure.py)
        stepped = steps_now or manual
        pending_gradients = not stepped  # backward ran; the optimizer has not stepped on it yet
        loop.batches_done, loop.total_batches = batch_idx + 1, loop.total_batches + 1
        step_done()
        if is_last:  # Lightning's order: the epoch's schedulers step at its last batch, before its hooks and validation
            step_epoch_schedulers(state, hooks, cut_short=False, plateau=False)
        if at_batch_end:  # on_train_batch_end's (Lightning's outputs: closure.py), then on_batch_end's
            outputs = None if batch is None else batch_end_outputs(output, manual=manual, accumulate=accumulate)
            _batch_end(log_collector, at_batch_end, outputs, batch, batch_idx)
        progress.completed()
        # Lightning's should_update_logs (0: never); decided here, so that a step with neither makes no call.
        log_due = stepped and (log_every and (loop.batches_stepped + 1) % log_every == 0 or state.should_stop)
        if log_due or val_every is not None or loop.plateau_due:
            _log_and_validate(
                ctx, fit_data, val_every, train_results, log_due=log_due, stepped=stepped, is_last=is_last
            )
        loop.batches_stepped += stepped
        if (stop := _stop_after_batch(ctx, is_last=is_last)) is not None:
            cut_short = stop
            break
        if stop_agreed():  # SIGTERM/SIGUSR1 (supervision/): every rank stops here
            supervision.save_and_exit(step=state.global_step, epoch=state.current_epoch)
    if pending_gradients:
        batches.finish_window(loop.batches_done - 1)  # the epoch ended inside an accumulation window
    return cut_short


def _batch_end(log_collector: LogCollector, calls: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
    """The batch-end hooks' calls; what they log is their own metric (the log collector's ``fx``),
    apart from training_step's, as Lightning keeps it."""
    log_collector.fx = "on_train_batch_end"
    for call in calls:
        call(outputs, batch, batch_idx)


def _log_and_validate(
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
        _verify_losses(loop)  # where the check is deferred (finite_loss.py), its read
        ctx.publisher.step_metrics()
    if val_every is not None and validates_after(state, settings, loop, val_every, ctx.runtime, is_last=is_last):
        _verify_losses(loop)
        loop.mid_epoch_validation, loop.stepped_pending = not is_last, int(stepped)
        loop.epoch_end_validation = is_last
        try:
            # gradients are released first where none wait for an optimizer step
            evaluation.run_validation(ctx, fit_data.val_loaders, release_grads=stepped)
        finally:
            loop.mid_epoch_validation, loop.stepped_pending = False, 0
            loop.epoch_end_validation = False
        state.log_collector.start_stage(train_results)
    if loop.plateau_due:  # Lightning's order: after on_train_batch_end and the validation, which may log their metric
        step_due_plateau_schedulers(state, ctx.hooks)


def _stop_after_batch(ctx: LoopContext, *, is_last: bool) -> bool | None:
    """Whether the epoch ends after this batch: max_steps reached (True when batches of the epoch
    are left: right after an optimizer step, so no gradients are pending), or a stop asked that
    may end it now (False); None to go on."""
    state, max_steps = ctx.state, ctx.settings.max_steps
    if max_steps != -1 and state.global_step >= max_steps:
        return not is_last
    if state.should_stop and can_stop_early(ctx):
        return False
    return None


def _timed_fetches(
    fetcher: Fetcher,
    next_batch: Callable[[], Any],
    transfer: Callable[[Any], Any] | None,
    start: int,
    state: LoopState,
) -> Iterator[tuple[int, Any, bool]]:
    """``(batch_idx, batch, is_last)`` of ``fetcher``'s batches (``next_batch()``: the next, or
    ``_EXHAUSTED``) on the device, counted from ``start``, adding the time each took to come to
    ``loop.data_seconds``; each batch given to the log collector and counted ready (Lightning's
    batch progress), ``trainer.is_last_batch`` set from its fetch on (Lightning's)."""
    loop, log_collector, progress = state.loop, state.log_collector, state.progress.train_batches
    clock = time.perf_counter
    for batch_idx in itertools.count(start):
        started = clock()
        batch = next_batch()
        if batch is _EXHAUSTED:
            loop.data_seconds += clock() - started
            return
        if transfer is not None:
            batch = transfer(batch)
        loop.data_seconds += clock() - started
        log_collector.set_batch("training_step", batch)
        state.is_last_batch = fetcher.done
        progress.ready()
        yield batch_idx, batch, fetcher.done
        if fetcher.done:  # no call past the last batch (a profiler records each, as Lightning's loop makes none)
            return


_EXHAUSTED = object()


def _end_epoch(ctx: LoopContext, train_results: StageResults, *, cut_short: bool) -> None:
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
    _verify_losses(loop)  # before the epoch's checkpoints
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


def _verify_losses(loop: LoopPosition) -> None:
    assert loop.loss_check is not None  # fit sets it
    loop.loss_check.verify()


def _copied_results(results: Any) -> dict[str, Any]:
    state: dict[str, Any] = results.state_dict()
    for entry in state.values():
        if entry["total"] is not None:
            entry["total"] = entry["total"].clone()  # accumulated in place by later self.log calls
    return state
