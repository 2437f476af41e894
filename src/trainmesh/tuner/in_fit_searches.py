"""Lightning 2.6's batch-size search and learning-rate range test as its finder callbacks run them:
inside the fit, before the callbacks' ``on_fit_start`` (``trainer/finder_runs.py``), each trial the
fit's training loop run again (``trainer/search_trials.py``), the fit's state restored after."""

from __future__ import annotations

import functools

from trainmesh.trainer.search_trials import SearchTrials
from trainmesh.tuner import temporary_checkpoint
from trainmesh.tuner.batch_size_scaling import BatchSizeAttribute, adjust, binsearch_scaling, power_scaling
from trainmesh.tuner.lr_finder import _ExchangeScheduler, _LRCallback, _LRFinder
from trainmesh.tuner.progress_bar_after_search import enable_progress_bar
from trainmesh.tuner.trial_loaders import TrialLoaders
from trainmesh.utilities.lightning_loggers import lightning_named_logger

log = lightning_named_logger("trainmesh.tuner.tuning")  # Lightning's lines, governed as its loggers'


def scale_batch_size(
    trials: SearchTrials,
    *,
    fit_follows: bool,
    mode: str,
    steps_per_trial: int,
    init_val: int,
    max_trials: int,
    batch_arg_name: str,
    margin: float,
    max_val: int,
) -> int:
    """The size found (set where the batch size lives); with ``fit_follows``, the fit reads the train
    loader the search ended with, its first iterator started as the search ends (as Lightning's)."""
    state, source = trials.ctx.state, trials.fit_data.source
    model, datamodule = state.module, source.datamodule
    size = BatchSizeAttribute(model, datamodule, batch_arg_name)
    size.warn_if_in_both()
    path = temporary_checkpoint.saved(trials.ctx.view.default_root_dir, "scale_batch_size")
    trial = functools.partial(
        trials.run, max_steps=steps_per_trial, limit_train_batches=1.0, limit_val_batches=steps_per_trial
    )
    loaders = TrialLoaders(datamodule if datamodule is not None else model, trial)
    if mode == "power":
        search = functools.partial(power_scaling, max_trials=max_trials, max_val=max_val)
    else:
        search = functools.partial(binsearch_scaling, max_trials=max_trials, margin=margin, max_val=max_val)
    adjust(size, loaders.dataset_length, value=init_val)
    found = search(loaders.trial, size, loaders.dataset_length, reset=loaders.reset)
    log.info(f"Finished batch size finder, will continue with full run using batch size {found}")
    # Lightning's _reset_dataloaders: the fit loop's data set up (its trainer.train_dataloader), and
    # its iterator made (for the fit that follows, or by finish())
    trials.fit_data.use_train_loader(loaders.finish(fit_follows=fit_follows))
    if fit_follows:
        trials.fit_data.start_first_epoch()
    else:
        trials.fit_data.train_loader()
    if trials.fit_data.validation_enabled():  # Lightning's _reset_dataloaders sets the val loaders up again:
        trials.fit_data.val_loaders(reload=True)  # the fit's (it asks for none after)
    enable_progress_bar(trials.ctx.view)
    trials.restore()
    temporary_checkpoint.restored(path)
    trials.ctx.state.ckpt_path = (
        path  # as Lightning's restore sets its _ckpt_path: what the fit then names (finder_runs)
    )
    return found


def range_test(
    trials: SearchTrials,
    *,
    min_lr: float,
    max_lr: float,
    num_training: int,
    mode: str,
    early_stop_threshold: float | None,
    says: str = "2.6",
) -> _LRFinder:
    """The search's trial and the fit's state back after it (Lightning's and 1.9.5's ``lr_find`` alike):
    its results, every rank's rank 0's; ``says``: whose lines about the temporary checkpoint."""
    ctx, state = trials.ctx, trials.ctx.state
    path = temporary_checkpoint.saved(ctx.view.default_root_dir, "lr_find", says=says)
    finder = _LRFinder(mode, min_lr, max_lr, num_training)
    recorder = _LRCallback(num_training, early_stop_threshold)
    schedulers = list(state.lr_scheduler_configs)
    _ExchangeScheduler(finder).on_fit_start(ctx.view, state.module)  # the search's rates in place of the module's
    start = state.global_step
    trials.run(max_steps=num_training + start, limit_val_batches=num_training, callbacks=[recorder])
    finder.results = {"lr": recorder.lrs, "loss": recorder.losses}
    if state.global_step != num_training + start:  # Lightning's line
        log.info(f"LR finder stopped early after {state.global_step} steps due to diverging loss.")
    state.lr_scheduler_configs[:] = schedulers
    trials.restore_loggers()  # (Lightning restores its params before the progress bar)
    enable_progress_bar(ctx.view)
    # Each rank ran the search on its own share (the losses its own); every rank takes rank 0's, as Lightning's
    finder.results = ctx.runtime.broadcast(finder.results, 0)
    trials.restore()
    temporary_checkpoint.restored(path, says=says)
    trials.ctx.state.ckpt_path = (
        path  # as Lightning's restore sets its _ckpt_path: what the fit then names (finder_runs)
    )
    return finder


def lr_find(
    trials: SearchTrials,
    *,
    fit_follows: bool,  # a Tuner's fit ends after the search: the iterator is made all the same, as Lightning's
    min_lr: float,
    max_lr: float,
    num_training: int,
    mode: str,
    early_stop_threshold: float | None,
    update_attr: bool = False,  # applied by the callback (or the Tuner) after the search
) -> _LRFinder:
    """The range test's results. Lightning's search ends setting the fit loop's data up again (the
    train loader asked for, its iterator made), inside the callback's ``isolate_rng``: with
    ``fit_follows`` the fit reads that iterator, so its shuffle is drawn from the generator as the
    search began, not as the fit goes on; a Tuner's drops it, but a loader shuffling with its own
    generator (which ``isolate_rng`` does not give back) has drawn from it."""
    finder = range_test(
        trials,
        min_lr=min_lr,
        max_lr=max_lr,
        num_training=num_training,
        mode=mode,
        early_stop_threshold=early_stop_threshold,
    )
    state = trials.ctx.state
    source = trials.fit_data.source
    if "train" in source.given:  # a loader given to fit: Lightning's fit loop reads it again
        loader = source.given["train"]
    else:  # Lightning's fit loop asks for its loader again
        loader = (source.datamodule if source.datamodule is not None else state.module).train_dataloader()
    trials.fit_data.use_train_loader(loader)
    trials.fit_data.start_first_epoch()
    return finder
