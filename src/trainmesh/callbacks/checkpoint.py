"""``Checkpoint``: the base class the Trainer recognises as checkpointing.

A callback of this class (``ModelCheckpoint``, ``OnExceptionCheckpoint``, a user's own) runs after
the other callbacks, so it sees every metric they logged; one given with ``enable_checkpointing=True``
stands instead of the default ``ModelCheckpoint``, as in Lightning.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView


class Checkpoint(Callback):
    """Subclass this for a checkpointing callback of your own.

    Examples:
        >>> class EveryEpoch(Checkpoint):
        ...     def on_train_epoch_end(self, trainer, module):
        ...         trainer.save_checkpoint(f"epoch{trainer.current_epoch}.ckpt")
    """


class OnExceptionCheckpoint(Checkpoint):
    """Save a checkpoint when fit/validate/test/predict stops with an exception, at
    ``dirpath/filename.ckpt``; a run that ends normally removes it at teardown.

    Args:
        dirpath: the folder the checkpoint is written to.
        filename: its name, without ``.ckpt`` (default ``'on_exception'``).

    Examples:
        >>> import trainmesh as tm
        >>> trainer = tm.Trainer(callbacks=[OnExceptionCheckpoint(".")], logger=False)
    """

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike[str], filename: str = "on_exception") -> None:
        if not filename:
            raise ValueError("OnExceptionCheckpoint: filename must name the file (without its extension)")
        self.dirpath = dirpath
        self.filename = filename

    @property
    def ckpt_path(self) -> str:
        return os.path.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    def on_exception(self, trainer: TrainerView, pl_module: Any, exception: BaseException) -> None:
        trainer.save_checkpoint(self.ckpt_path)

    def teardown(self, trainer: TrainerView, pl_module: Any, stage: str) -> None:
        if trainer.is_global_zero:
            Path(self.ckpt_path).unlink(missing_ok=True)
