"""Lightning's ``fit_loop.restarting`` after a fit's restore: which resumes skip the sanity check,
and which run the checkpoint's epoch end again (the fit loop calls these)."""

from __future__ import annotations

from typing import Any

from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.stop_limits import fit_done, fit_limits


def rerun_epoch_end_under_max_steps(ctx: LoopContext) -> bool:
    """Lightning 2.6.6's restart of a fit bounded by ``max_steps`` from a checkpoint taken at an
    epoch's end (its ``RESTARTED_ON_EPOCH_END``): with steps and epochs left, it runs that epoch's
    ``on_train_epoch_end`` hooks again (without scheduler steps) before the next epoch. Says whether
    it does (that epoch then counts as processed twice in Lightning's epoch progress)."""
    state, limits = ctx.state, fit_limits(ctx)
    if limits.max_steps == -1 or not state.loop.epoch_finished or fit_done(state, limits):
        return False
    if limits.max_epochs != -1 and state.current_epoch + 1 >= limits.max_epochs:
        return False  # nothing left: Lightning's fit ends before on_train_start
    state.loop.epoch_finished, state.loop.epoch_end_due = False, True
    return True


def restarting(ctx: LoopContext, checkpoint: dict[str, Any] | None) -> bool:
    """Lightning's ``fit_loop.restarting`` after a restore, which skips the sanity check: the
    checkpoint was taken inside an epoch (its batches begun and its end not reached, or reached in
    the validation after its last batch), or the fit is bounded by ``max_steps``."""
    if checkpoint is None:
        return False
    loop = ctx.state.loop
    return ctx.settings.max_steps != -1 or (loop.batches_done > 0 and not loop.epoch_finished)
