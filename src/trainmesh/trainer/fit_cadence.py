"""When a fit validates and when a stop asked ends it, as Lightning's training epoch loop decides
(``_should_check_val_fx``, ``_should_check_val_epoch``'s interval; when a stop asked may end it:
stop_limits.py): read by the fit loop (``fit_loop.py``) after each batch."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from trainmesh.trainer.stop_limits import min_met
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
