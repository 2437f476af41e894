"""Removing a checkpoint ModelCheckpoint no longer keeps: only its own files, only on rank 0, and
never the one this run resumed from."""

from __future__ import annotations

from trainmesh.callbacks.checkpoint_names import absolute, inside
from trainmesh.trainer_view import TrainerView


def remove_if_ours(trainer: TrainerView, path: str, *, owned: bool, dirpath: str | None) -> None:
    """Remove ``path`` (a file, or a sharded checkpoint's folder) where this callback wrote it
    (``owned``) inside its ``dirpath``; rank 0 removes, the other ranks return."""
    if not trainer.is_global_zero or not owned or not inside(path, dirpath):
        return
    # The checkpoint this run resumed from stays, whatever its rank now: it is the way back
    # should this run go wrong, and the user named it.
    if trainer.ckpt_path and absolute(trainer.ckpt_path) == absolute(path):
        return
    # A sharded checkpoint is a folder: it leaves its name in one step, then is deleted; with
    # AsyncCheckpointIO only once the save in flight (the one replacing it) is complete.
    trainer.remove_checkpoint(path)
