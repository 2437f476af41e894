"""When fit ends: Lightning's fit loop's ``done`` (its limits, and the words it logs on reaching
one), and when a stop asked (``trainer.should_stop``) may end it: its ``_can_stop_early``, with its
``min_epochs`` / ``min_steps`` as ``_parse_loop_limits`` settles them."""

from __future__ import annotations

import dataclasses

from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.loop_state import LoopState
from trainmesh.trainer.settings import LoopSettings
from trainmesh.utilities.rank_zero import rank_zero_info


def fit_done(state: LoopState, settings: LoopSettings, *, say: bool = False) -> bool:
    """Lightning's ``FitLoop.done``, in its order: ``max_steps``, ``max_epochs`` (``current_epoch``
    counts the epochs whose batches are over), then a stop asked once the minimums are met. With
    ``say`` (where the answer ends the fit), a limit reached is logged in Lightning's words."""
    if settings.max_steps != -1 and state.global_step >= settings.max_steps:
        limit = f"max_steps={settings.max_steps!r}"
    elif settings.max_epochs != -1 and state.current_epoch >= settings.max_epochs:
        limit = f"max_epochs={settings.max_epochs!r}"
    else:
        return state.should_stop and min_met(state, settings)
    if say:
        rank_zero_info(f"`Trainer.fit` stopped: `{limit}` reached.")
    return True


def fit_limits(ctx: LoopContext) -> LoopSettings:
    """The running fit's settings with ``max_epochs`` as the Trainer reads it now: a callback may
    lengthen the fit (``trainer.fit_loop.max_epochs += 1`` in its on_fit_start, Lightning's
    StochasticWeightAveraging on a model with batch norm) or shorten it, as in Lightning."""
    settings, max_epochs = ctx.settings, ctx.view.max_epochs
    if max_epochs is None or max_epochs == settings.max_epochs:
        return settings
    return dataclasses.replace(settings, max_epochs=max_epochs)


def min_met(state: LoopState, settings: LoopSettings) -> bool:
    """Lightning's ``_can_stop_early``: ``min_epochs`` epochs done (``current_epoch`` counts the one
    whose batches are over, as its ``epoch_progress.processed``) and ``min_steps`` optimizer steps."""
    min_epochs = _min_epochs(settings)
    epochs_met = not min_epochs or state.current_epoch >= min_epochs
    return epochs_met and (not settings.min_steps or state.global_step >= settings.min_steps)


def _min_epochs(settings: LoopSettings) -> int:
    """Lightning's ``_parse_loop_limits``: ``min_epochs=None`` is 1 where ``min_steps`` is given (so
    a stop asked in the first epoch waits for that epoch's end even once min_steps is met), else 0."""
    if settings.min_epochs is not None:
        return settings.min_epochs
    return 0 if settings.min_steps is None else 1


def can_stop_early(ctx: LoopContext) -> bool:
    """Whether a stop asked (``should_stop``) ends the epoch now; where ``min_epochs`` is not met,
    training goes on (should_stop stays set), saying so once, in Lightning's words."""
    state, settings = ctx.state, ctx.settings
    if min_met(state, settings):
        return True
    if not state.loop.min_not_met_told:
        state.loop.min_not_met_told = True
        rank_zero_info(
            f"Trainer was signaled to stop but the required `min_epochs={_min_epochs(settings)!r}` or"
            f" `min_steps={settings.min_steps!r}` has not been met. Training will continue..."
        )
    return False
