"""``ckpt_path="best"`` checked as Lightning 2.6's checkpoint connector checks it (``_parse_ckpt_path``), in its
words: a warning where several checkpoint callbacks could name the best, and its ``ValueError`` where none is
configured, or where the one configured has saved no best model (under ``fast_dev_run``, which saves none)."""

from __future__ import annotations

from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.rank_zero import rank_zero_warn


def check_best_known(trainer: TrainerView, fn: str) -> None:
    """Raise or warn as Lightning does before ``"best"`` is turned into the first checkpoint callback's best file."""
    callbacks = getattr(trainer, "checkpoint_callbacks", None) or []
    if len(callbacks) > 1:
        rank_zero_warn(
            f'`.{fn}(ckpt_path="best")` is called with Trainer configured with multiple `ModelCheckpoint`'
            " callbacks. It will use the best checkpoint path from first checkpoint callback."
        )
    callback = trainer.checkpoint_callback
    if not callback:
        raise ValueError(f'`.{fn}(ckpt_path="best")` is set but `ModelCheckpoint` is not configured.')
    if hasattr(callback, "best_model_path") and not callback.best_model_path:
        if trainer.fast_dev_run:
            raise ValueError(
                f'You cannot execute `.{fn}(ckpt_path="best")` with `fast_dev_run=True`.'
                f" Please pass an exact checkpoint path to `.{fn}(ckpt_path=...)`"
            )
        raise ValueError(
            f'`.{fn}(ckpt_path="best")` is set but `ModelCheckpoint` is not configured to save the best model.'
            " Pass the file's path, or fit first with a ModelCheckpoint that saves (and monitors what decides the best)"
        )
