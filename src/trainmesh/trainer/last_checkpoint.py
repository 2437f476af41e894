"""``validate/test/predict(ckpt_path="last")`` as Lightning 2.6's checkpoint connector reads it
(``_parse_ckpt_path``): the newest file named ``last`` (``ModelCheckpoint.CHECKPOINT_NAME_LAST``,
``last-v1.ckpt`` included) in a checkpoint callback's folder, or an ``OnExceptionCheckpoint``'s file;
with none, Lightning's warning and no checkpoint: the model's weights as they are. Where no
checkpoint callback of this Trainer knows its folder yet (a Trainer made only to evaluate an earlier
run), trainmesh's search below stays (Lightning would look in a new version folder and find nothing).

fit's ``"last"`` the program names reads the same files (:func:`fit_last_checkpoint`), in the folder
each ModelCheckpoint saves to in this fit (a new logger version folder: nothing, so Lightning's
warning and a fresh start); only ``Trainer(exact_resume=True)`` keeps trainmesh's own search of the
whole run (the newest complete checkpoint of any name, ``checkpoint/paths.py``), which is what
the automatic resume after a restart or preemption uses. That search resumed an earlier version
folder's ``last.ckpt`` where Lightning 2.6.6 trains from scratch (weights 2.48 apart), and for an
evaluation it loaded the newest top-k file where Lightning tests the fit's final weights
(``test(ckpt_path="last")`` gave test_loss 1.624 where Lightning gives 0.186).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from trainmesh.checkpoint import finish_interrupted_swaps
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.rank_zero import rank_zero_warn


def evaluation_last_checkpoint(trainer: TrainerView, stage: str) -> str | None:
    """The file ``ckpt_path="last"`` names for ``stage`` (validate/test/predict), or None, warned
    as Lightning warns, when no ``last`` file exists; ``"last"`` itself where no checkpoint callback
    knows its folder yet."""
    from trainmesh.callbacks.model_checkpoint import ModelCheckpoint

    callbacks = [cb for cb in getattr(trainer, "checkpoint_callbacks", None) or [] if isinstance(cb, ModelCheckpoint)]
    if not any(cb.dirpath for cb in callbacks):
        # no folder of this trainer's own yet (a Trainer made only to evaluate): trainmesh's search of the
        # run's folders, which falls back past a damaged file (checkpoint/paths.py)
        return "last"
    return _newest_last(trainer, stage, [(cb.dirpath, cb) for cb in callbacks if cb.dirpath])


def fit_last_checkpoint(trainer: TrainerView) -> str | None:
    """The file a program's ``fit(ckpt_path="last")`` resumes, as Lightning 2.6's ``_parse_ckpt_path``
    finds it: the newest ``last`` file of the folders this fit's ModelCheckpoints save to (their
    ``dirpath``, else Lightning's default folder) or an ``OnExceptionCheckpoint``'s file; None, with
    Lightning's warning, where there is none (also with no ModelCheckpoint): the fit starts fresh."""
    from trainmesh.callbacks.checkpoint_names import default_checkpoint_dir
    from trainmesh.callbacks.model_checkpoint import ModelCheckpoint

    callbacks = [cb for cb in getattr(trainer, "checkpoint_callbacks", None) or [] if isinstance(cb, ModelCheckpoint)]
    folders = [(cb.dirpath or default_checkpoint_dir(trainer), cb) for cb in callbacks]
    for folder, _ in folders:
        # a directory swap a kill cut in two (no atomic exchange: NFS, Lustre) left no last.ckpt: put
        # in place first, as fit's start-up cleanup did before this search came ahead of it
        finish_interrupted_swaps(str(folder), older_than=time.time())
    return _newest_last(trainer, "fit", folders)


def _newest_last(trainer: TrainerView, stage: str, folders: list[tuple[str, Any]]) -> str | None:
    """The newest of the ``last`` files in ``folders`` (each with its ModelCheckpoint) and the
    OnExceptionCheckpoints' files; None, with Lightning's warning, where none exists."""
    from trainmesh.callbacks.on_exception_checkpoint import OnExceptionCheckpoint

    candidates = {cb.ckpt_path for cb in trainer.callbacks if isinstance(cb, OnExceptionCheckpoint)}
    for folder, callback in folders:
        candidates |= _last_files(str(folder), callback)
    existing = {path: os.path.getmtime(path) for path in candidates if path and os.path.exists(path)}
    if not existing:
        # not an error in Lightning, "so it can be set and forget before the first `fit` run"
        rank_zero_warn(
            f'.{stage}(ckpt_path="last") is set, but there is no last checkpoint available.'
            " No checkpoint will be loaded. HINT: Set `ModelCheckpoint(..., save_last=True)`."
        )
        return None
    return max(existing, key=lambda path: existing[path])


def _last_files(folder: str, callback: Any) -> set[str]:
    """Lightning's ``ModelCheckpoint._find_last_checkpoints``: the folder's files whose name starts
    with the callback's ``CHECKPOINT_NAME_LAST`` (its pattern is matched at the start only)."""
    if not os.path.isdir(folder):
        return set()
    pattern = rf"^{callback.CHECKPOINT_NAME_LAST}(-(\d+))?"
    extension = callback.FILE_EXTENSION
    # absolute, as Lightning's (its fsspec ``ls`` lists a local folder's files by absolute path): the path
    # "Restoring states from the checkpoint path at ..." prints and trainer.ckpt_path holds
    return {
        os.path.normpath(os.path.abspath(os.path.join(folder, name)))
        for name in os.listdir(folder)
        if name.endswith(extension) and re.match(pattern, name[: -len(extension)])
    }
