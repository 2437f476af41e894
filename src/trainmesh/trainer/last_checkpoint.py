"""``validate/test/predict(ckpt_path="last")`` as Lightning 2.6's checkpoint connector reads it
(``_parse_ckpt_path``): the newest file named ``last`` (``ModelCheckpoint.CHECKPOINT_NAME_LAST``,
``last-v1.ckpt`` included) in a checkpoint callback's folder, or an ``OnExceptionCheckpoint``'s file;
with none, Lightning's warning and no checkpoint: the model's weights as they are. Where no
checkpoint callback of this Trainer knows its folder yet (a Trainer made only to evaluate an earlier
run), trainmesh's search below stays (Lightning would look in a new version folder and find nothing).

fit's ``"last"`` keeps trainmesh's resume rule (the newest complete checkpoint of any name,
``checkpoint/paths.py``). For an evaluation that rule loaded the newest top-k file where
Lightning tests the fit's final weights: ``ModelCheckpoint(monitor=...)`` without ``save_last``,
best at epoch 0, ``test(ckpt_path="last")`` gave test_loss 1.624 where Lightning gives 0.186.
"""

from __future__ import annotations

import os
import re

from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.rank_zero import rank_zero_warn


def evaluation_last_checkpoint(trainer: TrainerView, stage: str) -> str | None:
    """The file ``ckpt_path="last"`` names for ``stage`` (validate/test/predict), or None, warned
    as Lightning warns, when no ``last`` file exists; ``"last"`` itself where no checkpoint callback
    knows its folder yet."""
    from trainmesh.callbacks.model_checkpoint import ModelCheckpoint
    from trainmesh.callbacks.on_exception_checkpoint import OnExceptionCheckpoint

    callbacks = [cb for cb in getattr(trainer, "checkpoint_callbacks", None) or [] if isinstance(cb, ModelCheckpoint)]
    if not any(cb.dirpath for cb in callbacks):
        # no folder of this trainer's own yet (a Trainer made only to evaluate): trainmesh's search of the
        # run's folders, which falls back past a damaged file (checkpoint/paths.py)
        return "last"
    candidates = {cb.ckpt_path for cb in trainer.callbacks if isinstance(cb, OnExceptionCheckpoint)}
    for callback in callbacks:
        if callback.dirpath:
            candidates |= _last_files(callback)
    existing = {path: os.path.getmtime(path) for path in candidates if path and os.path.exists(path)}
    if not existing:
        # not an error in Lightning, "so it can be set and forget before the first `fit` run"
        rank_zero_warn(
            f'.{stage}(ckpt_path="last") is set, but there is no last checkpoint available.'
            " No checkpoint will be loaded. HINT: Set `ModelCheckpoint(..., save_last=True)`."
        )
        return None
    return max(existing, key=lambda path: existing[path])


def _last_files(callback: object) -> set[str]:
    """Lightning's ``ModelCheckpoint._find_last_checkpoints``: the folder's files whose name starts
    with the callback's ``CHECKPOINT_NAME_LAST`` (its pattern is matched at the start only)."""
    folder = str(callback.dirpath)  # type: ignore[attr-defined]
    if not os.path.isdir(folder):
        return set()
    pattern = rf"^{callback.CHECKPOINT_NAME_LAST}(-(\d+))?"  # type: ignore[attr-defined]
    extension = callback.FILE_EXTENSION  # type: ignore[attr-defined]
    # absolute, as Lightning's (its fsspec ``ls`` lists a local folder's files by absolute path): the path
    # "Restoring states from the checkpoint path at ..." prints and trainer.ckpt_path holds
    return {
        os.path.normpath(os.path.abspath(os.path.join(folder, name)))
        for name in os.listdir(folder)
        if name.endswith(extension) and re.match(pattern, name[: -len(extension)])
    }
