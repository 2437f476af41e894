"""An epoch's training batches, as Lightning's training epoch loop runs them: each fetched and
taken to the device, its training step and optimizer step (optimization/), its batch-end hooks,
then what the batch made due (fit_cadence.py: logging, validation, a stop)."""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

from trainmesh.trainer.epoch_end import step_epoch_schedulers
from trainmesh.trainer.fetching import Fetcher
from trainmesh.trainer.fit_cadence import log_and_validate, stop_after_batch
from trainmesh.trainer.fit_data import FitData
from trainmesh.trainer.hooks import TrainBatchHooks
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.loop_state import LoopState
from trainmesh.trainer.optimization import runners
from trainmesh.trainer.optimization.closure import batch_end_outputs, epoch_end_output
from trainmesh.trainer.profiling import FETCH_ACTION, profiled_call
from trainmesh.trainer.results import LogCollector, StageResults
from trainmesh.trainer.train_batch_start import END_OF_EPOCH, BatchStart


def train_batches(
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
            log_and_validate(ctx, fit_data, val_every, train_results, log_due=log_due, stepped=stepped, is_last=is_last)
        loop.batches_stepped += stepped
        if (stop := stop_after_batch(ctx, is_last=is_last)) is not None:
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
