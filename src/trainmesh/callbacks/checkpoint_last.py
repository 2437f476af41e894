"""ModelCheckpoint's ``last.ckpt``: when it is written (Lightning 2.6's rule), under which name, and how:
a checkpoint of its own, or a link (``save_last="link"``). The Trainer's default callback, as
Lightning's, writes none."""

from __future__ import annotations

from typing import Any

from trainmesh.callbacks.checkpoint_names import link_or_copy
from trainmesh.trainer_view import TrainerView

# ``callback`` is the ModelCheckpoint (not imported: model_checkpoint.py imports this module).


def last_due(callback: Any, trainer: TrainerView, *, mid_epoch: bool) -> bool:
    """Lightning 2.6's rule: with each step-cadence save; at an epoch's end (or after validation) only
    where a checkpoint was written at this step, or, with ``save_last="link"``, once one was; for a run
    written for pytorch-lightning 1.x (a hook 2.0 removed, or a Trainer spelled as 1.x's: trainer_members.py),
    1.9.5's: at every save point."""
    if not callback.save_last:
        return False
    if mid_epoch or callback._written_at_step == trainer.global_step:
        return True
    if getattr(trainer, "_written_for_lightning1", False):  # (a test's stand-in trainer has none)
        # pytorch-lightning 1.9.5 writes last.ckpt at every epoch-end save point, a top-k file written or
        # not (its _save_last_checkpoint is unconditional): a 1.x program resuming from last.ckpt after an
        # epoch that did not improve resumes from that epoch, not from the last improving one
        return True
    return callback.save_last == "link" and bool(callback._last_checkpoint_saved)


def save_last(callback: Any, trainer: TrainerView, metrics: dict[str, Any]) -> None:
    """Write ``last.ckpt`` as a checkpoint of its own (a program's ``save_last=True``: Lightning builds it
    anew), or link it to the newest checkpoint (``"link"``)."""
    previous, path = callback.last_model_path, _claim_path(callback, trainer, metrics)
    if callback.save_last == "link" and callback._last_checkpoint_saved and callback.save_top_k != 0:
        callback._owned.add(path)  # the link is this callback's file: replaced by the next one, as Lightning's
        if trainer.is_global_zero:
            link_or_copy(callback._last_checkpoint_saved, path)
        trainer.runtime.barrier()
    else:
        callback._write(trainer, path)
    if previous and previous != path:
        callback._remove(trainer, previous)


def _claim_path(callback: Any, trainer: TrainerView, metrics: dict[str, Any]) -> str:
    """The path ``last.ckpt`` is written to now, set as ``last_model_path`` before the write (the
    checkpoint holds it): the previous one is overwritten, any other file of that name is kept."""
    callback.last_model_path = callback._free_path(
        trainer, metrics, callback.CHECKPOINT_NAME_LAST, callback.last_model_path or None
    )
    return str(callback.last_model_path)
