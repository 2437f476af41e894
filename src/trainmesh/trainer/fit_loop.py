"""The fit loop: the fit's start and end hooks around its epochs, each epoch's start.

Its parts, in the order a fit runs them: fit_start.py (``begin_fit``: the restored position),
epoch_opening.py (the first epoch's data, replayed where a fit resumes), training_batches.py (an
epoch's batches, with what each makes due: fit_cadence.py), epoch_end.py (``end_epoch``).
"""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.trainer import evaluation
from trainmesh.trainer.combined_loaders import refuse_sequential_training
from trainmesh.trainer.construction import apply_epoch_factor
from trainmesh.trainer.epoch_end import end_epoch
from trainmesh.trainer.epoch_opening import OpenedEpoch, first_epoch, open_epoch
from trainmesh.trainer.fit_cadence import val_check_batches
from trainmesh.trainer.fit_data import FitData
from trainmesh.trainer.fit_start import begin_fit
from trainmesh.trainer.loader_states import load_loader_states, states_to_load
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.loop_progress import Counts
from trainmesh.trainer.model_mode import warn_of_modules_in_eval_mode
from trainmesh.trainer.profiling import profiled_call
from trainmesh.trainer.restart_counts import apply_epoch_loop_start, start_epoch_loop, warn_if_loader_not_resumable
from trainmesh.trainer.run_summary import announce_run
from trainmesh.trainer.settings import warn_if_max_epochs_unset
from trainmesh.trainer.stop_limits import fit_done, fit_limits
from trainmesh.trainer.training_batches import train_batches
from trainmesh.trainer.val_clock import BY_TIME, ValClock
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
    opened: OpenedEpoch | None = first_epoch(ctx, train_loader, resume_rng, fit_data.take_started_epoch())
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
            # (a rank ended by a flag set on it alone names it to the ranks still waiting for it)
            ctx.runtime.supervision.fit_ended(stopped_at=state.should_stop_set_at if state.should_stop else "")
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


def _run_epoch(ctx: LoopContext, fit_data: FitData, loader: Any, opened: OpenedEpoch | None) -> None:
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
    # Lightning's restart skips these (first_epoch), unless the epoch is not started in its counts
    starts = not mid_epoch_resume and (opened is None or not opened.after_last_batch)
    if ctx.lightning1:  # 1.9.5's fit loop applies the accumulation scheduler before the epoch's hooks
        apply_epoch_factor(ctx.view, state.module)
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
    batches = opened.batches if opened is not None and opened.batches is not None else open_epoch(state, loader, None)
    val_every = val_check_batches(state, ctx.settings, fit_data)
    if opened is not None:
        warn_if_loader_not_resumable(state, ctx.settings, loader)
        start_epoch_loop(state, ctx.settings, None if val_every == BY_TIME else val_every)  # (clock just started)
    if opened is not None and not mid_epoch_resume and fit_data.validates_first(val_every):
        # Lightning 1.x's trainer.tune searches validate before their first batch (fit_data.py)
        evaluation.run_validation(ctx, fit_data.val_loaders, release_grads=False, val_limit=fit_data.val_limit)
        state.log_collector.start_stage(train_results)
    cut_short = train_batches(ctx, fit_data, loader.batch_transfer(), batches, val_every, train_results)
    end_epoch(ctx, train_results, cut_short=cut_short)
