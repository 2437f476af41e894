"""Where a fit's epochs start: the first epoch's position after a resume, and each epoch's data iterator.

Resuming is exact: a checkpoint records where in the epoch it was taken and every RNG state,
and the resumed run replays the epoch's data order before continuing (``open_epoch``).
The fit loop (fit_loop.py) opens its first epoch here before ``on_train_start``, as Lightning's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainmesh.seed import capture_rng_state, restore_rng_state
from trainmesh.trainer.fetching import Fetcher
from trainmesh.trainer.iterator_timing import makes_iterators_as_1_9
from trainmesh.trainer.loop_context import LoopContext
from trainmesh.trainer.loop_state import LoopState
from trainmesh.trainer.stop_limits import fit_done, fit_limits
from trainmesh.utilities.dataloaders import begin_skip


@dataclass
class OpenedEpoch:
    """The first epoch of a fit, its iterator started before ``on_train_start`` (Lightning's order);
    ``batches`` None: started after ``on_train_epoch_start`` instead, as 1.9.5's (trainer/iterator_timing.py)."""

    batches: Fetcher | None
    mid_epoch_resume: bool  # a resumed epoch: its epoch-start hooks ran in the interrupted run
    # Resumed from a save in the previous epoch's last on_train_batch_end: Lightning's restart holds that
    # epoch done (no epoch-end hooks, no validation) and starts this one without its epoch-start hooks.
    after_last_batch: bool = False


def first_epoch(
    ctx: LoopContext, loader: Any, resume_rng: dict[str, Any] | None, started: tuple[dict[str, Any], Fetcher] | None
) -> OpenedEpoch | None:
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
        return OpenedEpoch(batches, mid_epoch_resume, after_last_batch)
    if resume_rng is None and makes_iterators_as_1_9(ctx):
        return OpenedEpoch(None, mid_epoch_resume, after_last_batch)
    return OpenedEpoch(open_epoch(state, loader, resume_rng), mid_epoch_resume, after_last_batch)


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


def open_epoch(state: LoopState, loader: Any, resume_rng: dict[str, Any] | None) -> Fetcher:
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
