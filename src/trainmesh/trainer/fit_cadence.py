"""When a fit validates and when a stop asked ends it, as Lightning's training epoch loop decides
(``_should_check_val_fx``, ``_should_check_val_epoch``'s interval, ``_can_stop_early``): read by the fit
loop (``fit_loop.py``) after each batch."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from trainmesh.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from trainmesh.trainer.fit_data import FitData
    from trainmesh.trainer.loop_context import LoopContext
    from trainmesh.trainer.loop_state import LoopPosition, LoopState
    from trainmesh.trainer.settings import LoopSettings


def validates_after(
    state: LoopState, settings: LoopSettings, loop: LoopPosition, val_every: int | float, *, is_last: bool
) -> bool:
    """Whether validation runs after the batch just trained, after its on_train_batch_end, as
    Lightning's ``_should_check_val_fx``: every ``val_every`` batches of the epoch (of the fit, all
    epochs counted, where ``check_val_every_n_epoch=None``; not at an epoch's end that is not one of
    them, nor where max_steps stops), after the last batch of a loader without a length, and where
    a stop was asked (``should_stop``) once ``min_epochs`` are done."""
    done = loop.total_batches if settings.check_val_every_n_epoch is None else loop.batches_done
    if done % val_every == 0 or is_last and val_every == math.inf:
        return True
    return state.should_stop and min_met(state, settings)


def min_met(state: LoopState, settings: LoopSettings) -> bool:
    """Lightning's ``_can_stop_early``: ``min_epochs`` epochs done (``current_epoch`` counts the one
    whose batches are over, as its ``epoch_progress.processed``) and ``min_steps`` optimizer steps."""
    epochs_met = not settings.min_epochs or state.current_epoch >= settings.min_epochs
    return epochs_met and (not settings.min_steps or state.global_step >= settings.min_steps)


def can_stop_early(ctx: LoopContext) -> bool:
    """Whether a stop asked (``should_stop``) ends the epoch now; where ``min_epochs`` is not met,
    training goes on (should_stop stays set), saying so once, in Lightning's words."""
    state, settings = ctx.state, ctx.settings
    if min_met(state, settings):
        return True
    if not state.loop.min_not_met_told:
        state.loop.min_not_met_told = True
        rank_zero_info(
            f"Trainer was signaled to stop but the required `min_epochs={settings.min_epochs!r}` or"
            f" `min_steps={settings.min_steps!r}` has not been met. Training will continue..."
        )
    return False


def val_check_batches(state: LoopState, settings: LoopSettings, fit_data: FitData) -> int | float | None:
    """How many training batches between validations this epoch; None when none is due."""
    if not fit_data.validates_in_epoch(state.current_epoch):
        return None
    limit = state.num_training_batches
    interval = settings.val_check_interval
    if isinstance(interval, int):
        return interval
    if limit == math.inf:
        if interval != 1.0:
            raise ValueError("val_check_interval as a fraction needs a train loader with a length; give an int")
        return math.inf  # unknown length: validate once, at the end of the epoch
    return max(1, int(limit * interval))
