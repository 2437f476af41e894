"""The loggers told of each checkpoint ModelCheckpoint writes, as Lightning 2.6's
``ModelCheckpoint._save_checkpoint`` tells them: ``logger.after_save_checkpoint(proxy(callback))``
on global rank 0 (a program's logger uploads or records its checkpoints there)."""

from __future__ import annotations

from typing import Any
from weakref import proxy

from trainmesh.trainer_view import TrainerView


def tell_loggers_of_save(callback: Any, trainer: TrainerView) -> None:
    """Each logger's ``after_save_checkpoint`` with a weak proxy of ``callback`` (Lightning's), on rank 0.
    A logger of the program's own without the method (not on Lightning's ``Logger``) is skipped."""
    if not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        after_save = getattr(logger, "after_save_checkpoint", None)
        if callable(after_save):
            after_save(proxy(callback))
