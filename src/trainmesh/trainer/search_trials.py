"""The trials of Lightning's batch-size and learning-rate searches, run inside the fit as Lightning 2.6
runs them (its ``BatchSizeFinder`` / ``LearningRateFinder`` at ``on_fit_start``, before any other
callback's): the fit's state saved as a checkpoint (the callbacks' and the module's
``on_save_checkpoint``), then for each trial the fit's training loop run again from step 0 with the
search's limits, Lightning's ``DummyLogger`` in place of the run's loggers and only the search's
callbacks (``prepare_data``, ``setup``, ``configure_optimizers`` and ``on_fit_start`` are not run again:
the module sees ``on_train_start`` ... ``on_train_end`` per trial), and at the end the run's loggers
back and the checkpoint restored (``on_load_checkpoint``), so the
fit goes on with the weights, optimizers and counts it had.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from trainmesh.loggers.logger import DummyLogger
from trainmesh.trainer.checkpointing import build_checkpoint, restore_checkpoint
from trainmesh.trainer.epoch_counts import restart_epoch_counts
from trainmesh.trainer.fit_data import FitData
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.loop_progress import restore_counters
from trainmesh.trainer.profiling import hook_dispatcher
from trainmesh.trainer.publishing import Publisher

# The fit's training loop: (context, data, resumed RNG states) -> None
TrainLoop = Callable[[LoopContext, FitData, Any], None]


class TunerExit(Exception):  # noqa: N818 (Lightning's _TunerExitException)
    """The Tuner's fit ends after its search (Lightning's ``_TunerExitException``): the teardown hooks
    run, ``on_fit_start`` / ``on_fit_end`` do not."""


class SearchTrials:
    """The search's trials in the running fit: ``run(...)`` per trial, ``restore()`` at the end."""

    def __init__(self, ctx: LoopContext, fit_data: FitData, train: TrainLoop) -> None:
        """``train``: the fit's training loop (``fit_loop.train``)."""
        self.ctx, self.fit_data, self._train = ctx, fit_data, train
        # Lightning's temporary checkpoint (`.scale_batch_size_<uuid>.ckpt`), kept in memory
        # a copy: the state dicts' tensors are the live ones, which the trials train (Lightning's is a file)
        self._checkpoint = copy.deepcopy(build_checkpoint(ctx.state, ctx.runtime, ctx.view))
        # and the loops' progress counts, which Lightning's checkpoint holds (trainer.fit_loop's after the search)
        self._counters = copy.deepcopy(ctx.state.progress)
        self._fresh = True  # the first trial starts from the state saved: nothing to restore
        self._last_data: FitData | None = None  # the last trial's loaders (a 1.x fit goes on with its validation)
        # Lightning's searches set trainer.logger = DummyLogger() (None without a logger) once the state is
        # saved, until they restore it: the module's self.logger.experiment... runs and writes nothing
        self._loggers = list(ctx.view.loggers)
        ctx.view.logger = DummyLogger() if self._loggers else None  # type: ignore[misc]

    def run(
        self,
        train_loader: Any = None,
        *,
        max_steps: int,
        limit_val_batches: int | float,
        limit_train_batches: int | float | None = None,
        callbacks: list[Any] | None = None,
    ) -> None:
        """One trial from step 0 (Lightning's ``_try_loop_run``): ``train_loader`` (None: the fit's own
        loader, asked for again) for ``max_steps`` steps, with ``callbacks`` only and the search's
        ``DummyLogger``."""
        ctx, state = self.ctx, self.ctx.state
        if not self._fresh:  # the loop's counts as the search began (Lightning loads its fit loop's state dict)
            restore_checkpoint(
                state, ctx.runtime, ctx.view, self._checkpoint, source="", weights_only=False, modules_restored=True
            )
            restore_counters(state.progress, self._counters)
        self._fresh = False
        restart_epoch_counts(state, resumed=False)
        state.should_stop = False
        limits: dict[str, Any] = {
            "max_steps": max_steps,
            "limit_val_batches": limit_val_batches,
            "num_sanity_val_steps": 0,
        }
        if limit_train_batches is not None:
            limits["limit_train_batches"] = limit_train_batches
        hooks = hook_dispatcher(ctx.view, state.module, list(callbacks or []), ctx.profiler)  # type: ignore[arg-type]
        trial = dataclasses.replace(
            ctx,
            settings=dataclasses.replace(ctx.settings, **limits),
            hooks=hooks,
            publisher=Publisher(state, ctx.view.loggers, is_global_zero=ctx.publisher.is_global_zero),
        )
        source = self.fit_data.source
        if ctx.view._written_for_lightning1:
            # 1.9.5's searches run their fit loop from a restored state: the restarting epoch loop finds a
            # validation check due before the first batch (batch_idx -1) and validates first (2.x skips it)
            source = dataclasses.replace(source, validate_first=True)
        if train_loader is not None:
            source = dataclasses.replace(source, given={**source.given, "train": train_loader})
        kept_hooks, state.hooks = state.hooks, hooks
        try:
            with torch.enable_grad():  # as the fit's loop (fit_loop.run_fit)
                data = FitData(trial, source)
                if ctx.view._written_for_lightning1:  # 1.9.5's trials ask for them once, where none are set up
                    data.keep_val_loaders(self._last_data or self.fit_data)  # (an earlier search's too)
                self._last_data = data
                self._train(trial, data, None)
        finally:
            state.hooks = kept_hooks

    def restore_loggers(self) -> None:
        """The run's loggers back (Lightning's searches restore them before their checkpoint)."""
        self.ctx.view.loggers = self._loggers  # type: ignore[misc]

    def restore(self) -> None:
        """The fit's state as the search began (Lightning restores its checkpoint: ``on_load_checkpoint``)."""
        ctx = self.ctx
        self.restore_loggers()
        restore_checkpoint(ctx.state, ctx.runtime, ctx.view, self._checkpoint, source="", weights_only=False)
        restore_counters(ctx.state.progress, self._counters)
        restart_epoch_counts(ctx.state, resumed=False)
        ctx.state.should_stop = False
        if ctx.view._written_for_lightning1 and self._last_data is not None:
            # 1.9.5 gives limit_val_batches back but not the count its search's validation loaders were set up
            # with: the fit validates num_training / steps_per_trial batches until they are asked for again
            self.fit_data.keep_val_loaders(self._last_data)
