"""Where the Trainer's checkpoints are looked for and cleared: "last"/"best" and a given path resolved
over this set-up's folders, validate/test/predict's default, interrupted saves removed at the start of fit."""

from __future__ import annotations

import os
import re
import time
from typing import Any

from trainmesh.checkpoint import CheckpointPlaces, remove_interrupted_saves, resolve_checkpoint
from trainmesh.trainer.best_checkpoint import check_best_known
from trainmesh.trainer.last_checkpoint import evaluation_last_checkpoint
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.rank_zero import rank_zero_info, rank_zero_warn

# trainmesh's own info lines: on stderr, as Lightning's are, and governed as they are (lightning_loggers.py)
log = lightning_named_logger(__name__)


def checkpoint_places(trainer: TrainerView) -> CheckpointPlaces:
    """Where an earlier run of this set-up may have saved, as ``checkpoint/paths.py`` searches it.

    An earlier run wrote under default_root_dir, or in its own version folder next to this
    run's logger folder, or in the checkpoint callback's fixed dirpath: a last.ckpt missed
    there would make fit start from scratch instead of resuming.
    """
    folders = [trainer.default_root_dir]
    if trainer.loggers:
        folders.append(os.path.dirname(trainer.log_dir))
    callback = trainer.checkpoint_callback
    if callback is not None and callback.dirpath:
        folders.append(callback.dirpath)
    return CheckpointPlaces(
        folders=tuple(folders),
        last_known=getattr(callback, "last_model_path", "") or "",
        best_known=getattr(callback, "best_model_path", "") or "",
        stage=trainer.stage or "",
        announces=trainer.is_global_zero,
    )


def evaluation_places(trainer: TrainerView, ckpt_path: str | os.PathLike[str] | None) -> CheckpointPlaces | None:
    """validate/test/predict(ckpt_path=...): "best" checked and this trainer's places taken before the run
    attaches the model's ``configure_callbacks`` (a fresh ModelCheckpoint there knows no best or last
    file), as Lightning 2.6 selects the path before its ``_run``. None for a fit (it reads them later)."""
    if ckpt_path is None or trainer.stage == "fit":
        return None
    if str(ckpt_path) == "best":
        check_best_known(trainer, trainer.stage or "fit")  # Lightning's checks and words first
    return checkpoint_places(trainer)


def resolve_ckpt_path(
    trainer: TrainerView,
    ckpt_path: str | os.PathLike[str],
    *,
    allow_fresh_start: bool = False,
    places: CheckpointPlaces | None = None,
) -> str | None:
    """Turn "last" / "best" into a file, and check that a given path exists
    (``checkpoint.resolve_checkpoint``, over ``places``: this trainer's :func:`checkpoint_places` where
    :func:`evaluation_places` took none)."""
    if str(ckpt_path) == "best" and places is None:
        check_best_known(trainer, trainer.stage or "fit")  # Lightning's checks and words first
    if str(ckpt_path) == "hpc":
        return hpc_checkpoint(trainer, trainer.stage or "fit")
    if str(ckpt_path) not in ("last", "best") and not os.path.exists(ckpt_path):
        raise_missing_checkpoint(trainer, str(ckpt_path))
    return resolve_checkpoint(ckpt_path, places or checkpoint_places(trainer), allow_fresh_start=allow_fresh_start)


def raise_missing_checkpoint(trainer: TrainerView, path: str) -> None:
    """A named checkpoint that is not there, as Lightning meets it: its checkpoint connector's line
    (``resume_start``) first, then its checkpoint IO's FileNotFoundError in its own words (2.6's, or
    1.9's for a run written for pytorch-lightning 1.x; a program may match them)."""
    rank_zero_info(f"Restoring states from the checkpoint path at {path}")
    if trainer._written_for_lightning1:  # (the module's 1.x hooks or the Trainer's 1.x spelling)
        raise FileNotFoundError(f"Checkpoint at {path} not found. Aborting training.")
    raise FileNotFoundError(f"Checkpoint file not found: {path}")


def hpc_checkpoint(trainer: TrainerView, stage: str) -> str:
    """``ckpt_path="hpc"`` as Lightning 2.6's checkpoint connector reads it (``_hpc_resume_path``): the
    ``hpc_ckpt_<N>.ckpt`` of ``default_root_dir`` with the highest N (the digits of the name after
    ``hpc_ckpt_``), else its ValueError."""
    folder = str(trainer.default_root_dir)
    versions = []
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            digits = re.sub("[^0-9]", "", name.split("hpc_ckpt_")[-1]) if "hpc_ckpt_" in name else ""
            if digits:
                versions.append(int(digits))
    if not versions:
        raise ValueError(
            f'`.{stage}(ckpt_path="hpc")` is set but no HPC checkpoint was found.'
            f" Please pass an exact checkpoint path to `.{stage}(ckpt_path=...)`"
        )
    return os.path.join(folder, f"hpc_ckpt_{max(versions)}.ckpt")


def program_ckpt_path(state: Any, ckpt_path: Any) -> tuple[Any, bool]:
    """Lightning 2.6's ``_select_ckpt_path`` where the program set ``trainer.ckpt_path = path`` (its
    "user managed" path): a run given no ``ckpt_path`` loads that path as set, run after run, until the
    program sets None; a run given one loads the one given, with Lightning's warning, and forgets the
    program's. The path, and whether it is the program's."""
    if not state.ckpt_user_managed:
        return ckpt_path, False
    if not ckpt_path:
        return state.ckpt_path, True
    rank_zero_warn(  # Lightning's words (fit's name whatever the run)
        f"`trainer.ckpt_path = {state.ckpt_path!r}` was called but then you passed"
        f" `trainer.fit(ckpt_path={ckpt_path!r})`. The latter will be loaded."
    )
    state.ckpt_path, state.ckpt_user_managed = None, False
    return ckpt_path, False


def evaluation_ckpt_path(trainer: TrainerView, stage: str, model: Any, ckpt_path: Any) -> Any:
    """The checkpoint validate/test/predict load, as Lightning chooses it: called without a model once one
    is connected (after a fit), "best" with Lightning's warning; else ``ckpt_path`` as given (None: the
    model's own weights)."""
    if str(ckpt_path) == "last":
        return evaluation_last_checkpoint(trainer, stage)
    if ckpt_path is not None or model is not None or trainer.lightning_module is None:
        return ckpt_path
    rank_zero_warn(
        f"`.{stage}(ckpt_path=None)` was called without a model. The best model of the previous `fit` call will "
        f"be used. You can pass `.{stage}(ckpt_path='best')` to use the best model or `.{stage}(ckpt_path='last')` "
        "to use the last model. If you pass a value, this warning will be silenced."
    )
    return "best"


def clear_interrupted_saves(trainer: TrainerView, ckpt_path: str | os.PathLike[str] | None) -> None:
    """At the start of fit, before this run saves anything: global rank 0 deletes the temporaries
    that killed saves left (see ``trainmesh.checkpoint.cleanup``) where this run saves and where it
    resumes from; the other ranks wait, so that every rank then finds the same checkpoints.

    Only what nothing modified since this moment is deleted: another live run's save in progress
    keeps touching its files.
    """
    from trainmesh.callbacks.model_checkpoint import ModelCheckpoint

    if trainer.is_global_zero:
        folders = [cb.dirpath for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath]
        removed = remove_interrupted_saves(folders, ckpt_path, checkpoint_places(trainer), older_than=time.time())
        if removed:
            log.info(
                f"trainmesh: removed {len(removed)} leftover(s) of interrupted checkpoint saves (e.g. {removed[0]})"
            )
    trainer.runtime.barrier()


def save_arguments(weights_only: bool | None, storage_options: Any) -> bool:
    """``Trainer.save_checkpoint``'s ``weights_only`` as Lightning takes it (None: False, said as its
    ``dump_checkpoint`` says it), after refusing ``storage_options``: Lightning's goes to a CheckpointIO
    plugin; its default one (``TorchCheckpointIO``) refuses it, and trainmesh has no plugin that takes it."""
    if storage_options is not None:
        raise TypeError(
            "Trainer.save_checkpoint(..., storage_options=...) is not supported: trainmesh writes checkpoints "
            "itself and has no CheckpointIO plugin that takes storage options (Lightning's default "
            "TorchCheckpointIO refuses them too); write the file locally and copy it where it should go"
        )
    if weights_only is None:
        rank_zero_info("`weights_only` was not set, defaulting to `False`.")
    return bool(weights_only)
