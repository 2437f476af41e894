"""A fit resumed from a checkpoint Lightning 2.x wrote (``trainer.fit(model, ckpt_path=...)`` on a
Lightning ``.ckpt``), continuing as Lightning's own resume of it does.

trainmesh writes Lightning's ``loops`` entry beside its own ``loop`` entry; a Lightning checkpoint has
only the former. Its position is read from Lightning's progress counters here, in trainmesh's terms
(the batches trained in the epoch, whether the epoch's end ran or is due); what Lightning does not save
is not restored, as in Lightning: no random generators (the resumed fit draws from the program's own),
no gradients of an unfinished accumulation window, no epoch accumulators, and a resume inside an epoch
reads the train loader afresh from its first batch while counting the batches on from the saved index
(epoch_opening.open_epoch). The weights, optimizers, schedulers, precision and callback states load as for
trainmesh's own checkpoints.
"""

from __future__ import annotations

from typing import Any

from trainmesh.checkpoint.lightning_keys import written_by_lightning


def _fit_loop(checkpoint: Any) -> dict[str, Any] | None:
    loops = checkpoint.get("loops") if isinstance(checkpoint, dict) else None
    fit_loop = loops.get("fit_loop") if isinstance(loops, dict) else None
    return fit_loop if isinstance(fit_loop, dict) else None


def resumable_lightning_checkpoint(checkpoint: Any) -> bool:
    """A full checkpoint Lightning wrote: its weights, optimizer states and loops' counters."""
    return written_by_lightning(checkpoint) and "optimizer_states" in checkpoint and _fit_loop(checkpoint) is not None


def _counts(progress: dict[str, Any], part: str) -> tuple[int, int, int, int]:
    counts = progress[part]
    return (
        int(counts["ready"]),
        int(counts["started"]),
        int(counts.get("processed", counts["completed"])),
        int(counts["completed"]),
    )


def loop_entry_of(checkpoint: dict[str, Any], *, steps_bounded: bool) -> dict[str, Any]:
    """trainmesh's ``loop`` entry for where a Lightning checkpoint stands (checkpointing._loop_entry).
    ``steps_bounded``: the resumed Trainer has ``max_steps`` (Lightning's ``_iteration_based_training``)."""
    fit_loop = _fit_loop(checkpoint)
    assert fit_loop is not None  # resumable_lightning_checkpoint said so
    batches, epochs = fit_loop["epoch_loop.batch_progress"], fit_loop["epoch_progress"]
    ready, started, processed, completed = _counts(epochs, "total")
    batch_total, batch_current = _counts(batches, "total"), _counts(batches, "current")
    in_epoch = started == processed + 1  # the epoch started, its end not reached
    # in the validation after the epoch's last batch (that batch's end over): the epoch's end is due
    end_due = in_epoch and bool(batches.get("is_last_batch")) and batch_total[2] == batch_total[3]
    # the epoch's end ran (its on_train_epoch_end), the epoch not completed yet: a resume goes on with the next
    finished = started > 0 and processed == started and completed == processed - 1
    # the epoch counted completed (a fit's stop, max_steps inside the epoch included): Lightning's resume
    # starts the next epoch afresh, unless the resumed Trainer has max_steps: then its fit loop restarts
    # (fit_loop.restarting's setter) and so does its epoch loop, which counts that next epoch's batches
    # on from the saved epoch's batch index (reset_on_restart), all of them done at its last batch
    counted = started > 0 and ready == started == processed == completed
    counted_on = counted and steps_bounded
    return {
        "batches_done": batch_current[2] if in_epoch or finished or counted_on else 0,
        "epoch_finished": finished or end_due,
        "epoch_not_started": counted_on,
        "epoch_end_due": end_due,
        "epoch_start_rng": None,  # not saved: the epoch's loader is read afresh (epoch_opening.open_epoch)
        "total_batches": batch_total[2],
        "batches_stepped": int(fit_loop.get("epoch_loop.state_dict", {}).get("_batches_that_stepped", 0)),
    }
