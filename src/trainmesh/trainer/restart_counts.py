"""The counters a resumed fit shows, as Lightning 2.6's restored loops show them.

Lightning's ``fit(ckpt_path=)`` loads its loops' state dicts (the checkpoint's ``loops`` entry,
which trainmesh writes as Lightning does) and shows them as saved until its training epoch loop
starts (``_TrainingEpochLoop.reset``, after ``on_train_start``): a save in ``on_train_batch_end``
holds that batch not yet completed, ``_batches_that_stepped`` without that batch's step (nor, from
a validation after a batch, the step of the batch validated after), the validation loop's batch
progress and ``is_last_batch`` of the save. As that loop starts, the batch counts are completed and
``_batches_that_stepped`` counts the saved batch's step, which a save in ``on_train_batch_end`` left
out for good: from then on the loggers' steps are one higher than the checkpoint's global step (its
``reset`` adds one where the saved batch ended an accumulation window).

``restore_shown_counts`` sets what ``on_train_start`` reads and returns the counts of the epoch
loop's start; the fit loop applies them there (``apply_epoch_loop_start``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from trainmesh.trainer.loop_progress import Counts, EpochLoopStart, Progress

if TYPE_CHECKING:
    from trainmesh.trainer.loop_state import LoopState
    from trainmesh.trainer.settings import LoopSettings


def _counts(saved: Any) -> Counts | None:
    if not isinstance(saved, dict):
        return None
    try:
        return Counts(*(int(saved[key]) for key in ("ready", "started", "processed", "completed")))
    except (KeyError, TypeError, ValueError):
        return None


def _progress(saved: Any) -> Progress | None:
    """A Lightning ``_BatchProgress`` state dict as trainmesh's counters; None where it is not one."""
    if not isinstance(saved, dict):
        return None
    total, current = _counts(saved.get("total")), _counts(saved.get("current"))
    if total is None or current is None:
        return None
    return Progress(total=total, current=current, is_last_batch=bool(saved.get("is_last_batch", False)))


def _stage(batches: Progress, restarting: bool) -> str:
    """Lightning's ``_TrainingEpochLoop.update_restart_stage`` on the restored batch progress."""
    total = batches.total
    if not restarting or not total.ready == total.started:
        return ""
    if total.processed == total.started == total.completed + 1:
        return "batch_end"
    if total.processed == total.started == total.completed:
        return "last"
    return "inside"


def restore_shown_counts(
    state: LoopState, checkpoint: dict[str, Any], *, accumulate: int, restarting: bool
) -> EpochLoopStart | None:
    """What the resumed fit shows until its epoch loop starts, from the checkpoint's Lightning ``loops``
    entry; returns what that start sets (``start_epoch_loop``). None: a checkpoint without Lightning's
    entry (an older trainmesh one), whose counts are kept as restored."""
    loops = checkpoint.get("loops")
    fit_loop = loops.get("fit_loop") if isinstance(loops, dict) else None
    if not isinstance(fit_loop, dict):
        return None
    batches, validation = (
        _progress(fit_loop.get("epoch_loop.batch_progress")),
        _progress(fit_loop.get("epoch_loop.val_loop.batch_progress")),
    )
    stepped = (fit_loop.get("epoch_loop.state_dict") or {}).get("_batches_that_stepped")
    if batches is None or validation is None or not isinstance(stepped, int):
        return None
    progress, loop = state.progress, state.loop
    ready = batches.current.ready
    at_start = EpochLoopStart(
        train_batches=Progress(
            total=Counts.at(loop.total_batches), current=Counts.at(loop.batches_done), is_last_batch=False
        ),
        batches_stepped=stepped,
        stage=_stage(batches, restarting),
        # Lightning's _should_accumulate as its restart reads it: the saved batch stepped unless inside a window
        window_ended=ready % accumulate == 0 or batches.is_last_batch or ready >= state.num_training_batches,
        # as fit_loop.run_fit loads the loaders' states: Lightning's file, or a named resume (not an exact one)
        rereads_epoch=restarting and ("loop" not in checkpoint or state.named_resume),
    )
    if at_start.stage == "inside":  # Lightning's reset_on_restart: the batch counts again, its total keeps the try
        current = Counts.at(batches.current.completed)
        at_start = dataclasses.replace(at_start, train_batches=Progress(dataclasses.replace(batches.total), current))
    progress.train_batches = batches
    progress.fit_validation = validation
    state.is_last_batch = batches.is_last_batch
    loop.batches_stepped = stepped
    return at_start


def apply_epoch_loop_start(state: LoopState) -> None:
    """The resumed fit's epoch loop starts (Lightning's ``_TrainingEpochLoop.reset``): its batch counts
    from here (``start_epoch_loop`` follows, once the epoch's validation cadence is known)."""
    state.progress.current_steps_ready_ahead = 0  # Lightning's reset_on_restart: this epoch's ready is its completed
    at_start = state.loop.epoch_loop_start
    if at_start is not None:
        state.progress.train_batches = at_start.train_batches


def warn_if_loader_not_resumable(state: LoopState, settings: LoopSettings, loader: Any) -> None:
    """Lightning 2.6's restarted epoch loop (``_TrainingEpochLoop.reset``): a checkpoint whose global step
    ends inside an epoch, resumed by re-reading the epoch from a loader that keeps no state (not every one
    of its loaders has ``state_dict``/``load_state_dict``), is said to be unreliable, in its words.
    trainmesh's exact resume (``exact_resume=True``, a restart) replays the epoch's data itself: no warning."""
    from trainmesh.trainer.loader_states import all_stateful
    from trainmesh.utilities.rank_zero import rank_zero_warn
    from trainmesh.utilities.warnings import PossibleUserWarning

    at_start = state.loop.epoch_loop_start
    if at_start is None or not at_start.rereads_epoch or state.num_training_batches == math.inf:
        return
    expected_steps = math.ceil(state.num_training_batches / settings.accumulate_grad_batches)
    if state.global_step % expected_steps != 0 and not all_stateful(loader):
        rank_zero_warn(
            "You're resuming from a checkpoint that ended before the epoch ended and your dataloader is"
            " not resumable. This can cause unreliable results if further training is done."
            " Consider using an end-of-epoch checkpoint or make your dataloader resumable by implementing"
            " the `state_dict` / `load_state_dict` interface.",
            category=PossibleUserWarning,
        )


def start_epoch_loop(state: LoopState, settings: LoopSettings, val_every: int | float | None) -> None:
    """Lightning's restarted epoch loop before its first batch. Its ``reset`` counts the saved batch's
    step in ``_batches_that_stepped`` (which the checkpoint left out) where the save was in or inside a
    batch; where a validation was due after the saved batch, its first ``advance`` does not run it:
    after a save in the validation (or after it) the step is counted as the batch's end does; after a
    save in or inside the batch, the validation's batch progress counts it as run
    (``increment_progress_to_evaluation_end``, added to the restored counts, ``current`` too)."""
    at_start, state.loop.epoch_loop_start = state.loop.epoch_loop_start, None
    if at_start is None:
        return
    loop = state.loop
    done = loop.total_batches if settings.check_val_every_n_epoch is None else loop.batches_done
    validation_due = bool(at_start.stage) and val_every is not None and done % val_every == 0
    counted = at_start.stage in ("batch_end", "inside") or (at_start.stage == "last" and validation_due)
    loop.batches_stepped = at_start.batches_stepped + int(counted and at_start.window_ended)
    counts = state.batch_counts.get("fit", [])
    if at_start.stage == "last" or not validation_due or not counts or max(counts) in (0, math.inf):
        return
    for loader in state.val_loaders or []:  # Lightning's evaluation loop resets: its iterators start (a seed drawn)
        iter(loader)
    validation, added = state.progress.fit_validation, int(max(counts))
    for kept in (validation.total, validation.current):
        kept.ready, kept.started = kept.ready + added, kept.started + added
        kept.processed, kept.completed = kept.processed + added, kept.completed + added
    validation.is_last_batch = True
