"""What a fit does before its train loader (Lightning's ``_run`` up to its fit loop's ``run``): the
loop's position set, the step hooks checked, ``on_fit_start``, a checkpoint restored, the epoch
counts restarted, the hyperparameters logged and the sanity check run."""

from __future__ import annotations

import functools
from typing import Any

from trainmesh.manual_calls import ManualBackward
from trainmesh.trainer import evaluation, manual_optimization
from trainmesh.trainer.epoch_counts import restart_epoch_counts
from trainmesh.trainer.finder_runs import after_searches, run_searches
from trainmesh.trainer.finite_loss import FiniteLossCheck
from trainmesh.trainer.fit_data import FitData
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.loop_progress import restore_optimizer_progress, scheduler_progress_of
from trainmesh.trainer.loop_state import LoopPosition
from trainmesh.trainer.optimization import runners
from trainmesh.trainer.optimization_hooks import refuse_uncallable_step_hooks, with_backward_hooks
from trainmesh.trainer.restart import rerun_epoch_end_under_max_steps, restarting
from trainmesh.trainer.restart_counts import restore_shown_counts
from trainmesh.trainer.search_trials import TrainLoop
from trainmesh.trainer.stop_limits import fit_limits


def begin_fit(
    ctx: LoopContext, fit_data: FitData, checkpoint: dict[str, Any] | None, source: str, train: TrainLoop
) -> tuple[Any, dict[str, Any] | None]:
    """What a fit does before its train loader: the loop's position, the step hooks checked,
    ``on_fit_start``, the checkpoint restored, Lightning 1.x's pretrain routine, the hyperparameters
    logged and the sanity check. Returns the resumed epoch's RNG states (None on a fresh start) and the
    checkpoint restored (None also where a finder's search took its place: finder_runs.after_searches)."""
    state, runtime, settings, hooks = ctx.state, ctx.runtime, ctx.settings, ctx.hooks
    # Lightning's counts across fits of one Trainer carry on into a second fit (its loops persist):
    # the loggers' step and the batch count check_val_every_n_epoch=None validates by
    state.loop = LoopPosition(
        loss_check=FiniteLossCheck.for_device(ctx.view, runtime.device),
        total_batches=state.loop.total_batches,
        batches_stepped=state.loop.batches_stepped,
    )
    state.manual_backward = None
    manual = manual_optimization.is_manual(state.module)
    if manual:  # its settings and strategy were checked before the model was placed (stage_setup.prepare_stage)
        state.manual_backward = ManualBackward(with_backward_hooks(hooks, runtime))
    refuse_uncallable_step_hooks(hooks, state.module, runtime, manual=manual)
    hooks.refuse_lightning1_epoch_end_outputs()
    runners.check_before_fit(state, runtime, manual=manual)
    # Lightning's order: on_fit_start before the training state (optimizers, loops) is restored, so a
    # callback may rebuild the optimizers' param groups the checkpoint holds (BaseFinetuning does).
    run_searches(ctx, fit_data, train)  # the finders' (Lightning's at their on_fit_start, the first callbacks')
    hooks.call("on_fit_start")
    checkpoint = after_searches(ctx, checkpoint, source)
    # Lightning's zero_grad() as the stage starts; before the restore here, which brings back the gradients
    # of an accumulation window the checkpoint was taken in (a bit-identical resume)
    state.module.zero_grad()
    resume_rng, processed_again = (
        (None, False) if checkpoint is None else _restore_training_state(ctx, checkpoint, source)
    )
    iteration_based = fit_limits(ctx).max_steps != -1
    restart_epoch_counts(
        state, resumed=checkpoint is not None, processed_again=processed_again, iteration_based=iteration_based
    )
    state.loop.plateau_held = restarting(ctx, checkpoint)  # through the fit's first epoch (epoch_end.end_epoch)
    state.progress.fit_started = True

    # As Lightning 2.x, the modules keep their own modes (a part frozen in eval mode stays so).
    if ctx.log_hyperparams:  # Trainer(enable_autolog_hparams=False): not
        ctx.publisher.hyperparameters()
    if fit_data.validation_enabled() and settings.num_sanity_val_steps != 0 and not restarting(ctx, checkpoint):
        # A fit resumed after an epoch's end too, as Lightning's: the epoch's accumulators restored
        # from the checkpoint are kept aside meanwhile (the generators are restored when the epoch's data starts).
        resumed_results = state.log_collector.results
        evaluation.run_sanity_check(ctx, fit_data.val_loaders, fit_data.val_limit)
        state.log_collector.start_stage(resumed_results)
    return resume_rng, checkpoint


def _restore_training_state(ctx: LoopContext, checkpoint: dict[str, Any], source: str) -> tuple[Any, bool]:
    """Lightning's ``restore_training_state`` after ``on_fit_start``: the checkpoint's training state (the
    weights too where they were not restored before ``configure_optimizers``) and the counts the resumed
    fit shows. Returns the resumed epoch's RNG states and whether the saved epoch's end is processed again."""
    from trainmesh.trainer.checkpointing import announce_nothing_left, restore_checkpoint
    from trainmesh.trainer.resume import say_restored

    state, runtime = ctx.state, ctx.runtime
    restore = functools.partial(restore_checkpoint, state, runtime, ctx.view, checkpoint, source=source)
    resume_rng = restore(weights_only=False, modules_restored=ctx.modules_restored)
    say_restored(source, fitting=True)
    announce_nothing_left(state, fit_limits(ctx), source, announces=ctx.publisher.is_global_zero)
    processed_again = rerun_epoch_end_under_max_steps(ctx)
    state.progress.train_batches.restart(state.loop.total_batches, state.loop.batches_done)
    state.progress.schedulers = scheduler_progress_of(checkpoint)
    restore_optimizer_progress(state.progress, checkpoint)
    # what on_train_start reads is the checkpoint's counts, as Lightning's restored loops (restart_counts.py)
    state.loop.epoch_loop_start = restore_shown_counts(
        state, checkpoint, accumulate=ctx.view.accumulate_grad_batches, restarting=restarting(ctx, checkpoint)
    )
    return resume_rng, processed_again
