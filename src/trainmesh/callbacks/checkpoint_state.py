"""What ModelCheckpoint saves in a checkpoint (its ``state_dict``) and takes back from one (its
``load_state_dict``), apart from the callback's file so that that file keeps its cadence and ranking."""

from __future__ import annotations

import os
import warnings
from typing import Any

from trainmesh.callbacks.checkpoint_names import as_score, worst


def saved_state(callback: Any) -> dict[str, Any]:
    """``ModelCheckpoint.state_dict``: Lightning's keys, with ``mode`` and ``last_global_step_saved``."""
    # Lightning 2.6's keys in its order (programs read them from the checkpoint), then trainmesh's
    return {
        "monitor": callback.monitor,
        "best_model_score": callback.best_model_score,  # tensors, as in Lightning's state
        "best_model_path": callback.best_model_path,
        "current_score": callback.current_score,
        "dirpath": callback.dirpath,
        "best_k_models": dict(callback.best_k_models),
        "kth_best_model_path": callback.kth_best_model_path,
        "kth_value": callback.kth_value,
        "last_model_path": callback.last_model_path,
        "mode": callback.mode,
        "last_global_step_saved": callback._last_global_step_saved,
    }


# ``callback`` is the ModelCheckpoint whose load_state_dict this is (not imported: model_checkpoint.py
# imports this module).
def restore_state(callback: Any, state_dict: dict[str, Any]) -> None:
    """``ModelCheckpoint.load_state_dict``: the ranking continues in the saved folder, or starts afresh."""
    saved_dir = state_dict.get("dirpath")
    callback._last_global_step_saved = int(state_dict.get("last_global_step_saved", 0))
    callback.best_model_path = state_dict.get("best_model_path", "")
    # Lightning's rule: a folder other than the saved one (given, or this run's logger's, resolved at
    # setup) starts afresh; a resumed fit neither ranks nor deletes the first run's files
    if (
        saved_dir is not None
        and callback.dirpath is not None
        and os.path.abspath(saved_dir) != os.path.abspath(callback.dirpath)
    ):
        warnings.warn(  # Lightning 2.6's words (a program may filter its warnings by them)
            f"The dirpath has changed from {saved_dir!r} to {callback.dirpath!r},"
            " therefore `best_model_score`, `kth_best_model_path`, `kth_value`, `last_model_path` and"
            " `best_k_models` won't be reloaded. Only `best_model_path` will be reloaded.",
            UserWarning,
            stacklevel=2,
        )
        return
    # Lightning restores the score only here, in the folder it was ranked in.
    callback.best_model_score = state_dict.get("best_model_score")  # the setter takes a float or tensor
    # A state ranked by another monitor is restored too, silently, as Lightning's (its state key holds
    # the monitor, so a Trainer's restore reaches this only through a Lightning 1.x key or a direct call)
    # No dirpath of our own (or the same one): continue in the checkpoint's folder, so the
    # resumed run keeps ranking, and deleting, the files the first run wrote.
    callback.dirpath = saved_dir or callback.dirpath
    # Checkpoints written before the scores were tensors hold floats: both load. current_score is saved
    # but not taken back (both owners': it stays the run's own, e.g. after test(ckpt_path="best"))
    callback.last_model_path = state_dict.get("last_model_path", "")
    callback.kth_best_model_path = state_dict.get("kth_best_model_path", "")
    callback.kth_value = as_score(state_dict.get("kth_value", worst(callback.mode)))
    callback.best_k_models = {str(k): as_score(v) for k, v in state_dict.get("best_k_models", {}).items()}
    callback._owned.update(
        p for p in (*callback.best_k_models, callback.best_model_path, callback.last_model_path) if p
    )
