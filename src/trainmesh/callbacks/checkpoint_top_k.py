"""ModelCheckpoint's top-k bookkeeping: whether the monitored value is there to rank by (Lightning's
warn-then-raise rule), which file a new value replaces, and which of the kept files is the best and
the k-th. Every rank runs it with the same ``callback_metrics``; whether a value enters a full top k
is decided by all ranks together (``_is_top_k``), because the save that follows is collective."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from trainmesh.callbacks.checkpoint_names import as_score, worst
from trainmesh.nested_metrics import refuse_nested_monitor
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.exceptions import MisconfiguredValue

# ``callback`` is the ModelCheckpoint (not imported: model_checkpoint.py imports this module).


def monitor_available(callback: Any, metrics: dict[str, Any], mid_epoch: bool) -> bool:
    """Whether this save can be ranked: the monitored value is logged (or nothing is monitored)."""
    if callback.monitor is None or callback.save_top_k == 0 or callback.monitor in metrics:
        return True
    if not callback._validated_this_fit:
        # Lightning's rule: before any validation has run the metric may just not exist yet (a
        # validation metric, or no validation data): warn and rank nothing; after one, raise.
        if not callback._warned_missing:
            callback._warned_missing = True
            warnings.warn(
                f"{_owners_missing_key(callback.monitor, metrics)} (No validation has run yet: this checkpoint is "
                "not ranked.)",
                UserWarning,
                stacklevel=3,
            )
        return False
    raise MisconfiguredValue(
        f"{_owners_missing_key(callback.monitor, metrics)} So checkpoints cannot be ranked: log it in the Module "
        "(a validation metric needs validation data), or set monitor to one of the names above."
    )


def _owners_missing_key(monitor: str, metrics: dict[str, Any]) -> str:
    """Lightning's words (1.9.5's and 2.6's alike), which a program or its tests may match."""
    return (
        f"`ModelCheckpoint(monitor={monitor!r})` could not find the monitored key in the returned metrics:"
        f" {list(metrics)}. HINT: Did you call `log({monitor!r}, value)` in the `LightningModule`?"
    )


def save_latest(callback: Any, trainer: TrainerView, metrics: dict[str, Any]) -> None:
    """``monitor=None``: the newest checkpoint is the best one; ``save_top_k=1`` replaces the previous file.
    As Lightning's, the previous file is overwritten under any ``save_top_k`` where the new one has its
    name (``filename="{epoch}"`` saved twice an epoch: one file, not a ``-v1`` beside it)."""
    previous = callback.best_model_path
    path = callback._free_path(trainer, metrics, None, previous or None)
    callback.best_model_path = path
    callback._write(trainer, path)
    if callback.save_top_k == 1 and previous and previous != path:
        callback._remove(trainer, previous)


def save_if_top_k(callback: Any, trainer: TrainerView, metrics: dict[str, Any], value: Any) -> None:
    """Save where ``value`` enters the top k, dropping the k-th file it replaces."""
    # Lightning's order (_save_monitor_checkpoint): a value outside the top k changes nothing,
    # current_score included; a NaN that enters (the top k not full yet) is kept as the worst value.
    refuse_nested_monitor("ModelCheckpoint", callback.monitor, value, TypeError)  # 1.9.5's type
    current = as_score(value)
    if not _is_top_k(callback, trainer, float(current)):
        callback._say(trainer, f"{callback.monitor!r} was not in top {callback.save_top_k}")
        return
    k = len(callback.best_k_models) + 1 if callback.save_top_k == -1 else callback.save_top_k
    dropped = None
    if len(callback.best_k_models) == k and k > 0:
        dropped = callback.kth_best_model_path
        callback.best_k_models.pop(dropped)
    if torch.isnan(current):
        current = torch.tensor(worst(callback.mode), device=current.device)
    path = callback._free_path(trainer, metrics, None, dropped)
    callback.current_score = current
    callback.best_k_models[path] = current
    _update_ranking(callback, full=len(callback.best_k_models) == k)
    callback._say(
        trainer,
        f"{callback.monitor!r} reached {current:0.5f} (best {callback.best_model_score:0.5f}), saving model to {path!r}"
        f" as top {k}",
    )
    callback._write(trainer, path)
    if dropped and dropped != path:
        callback._remove(trainer, dropped)


def _is_top_k(callback: Any, trainer: TrainerView, score: float) -> bool:
    if callback.save_top_k == -1 or len(callback.best_k_models) < callback.save_top_k:
        return True
    kth = float(callback.best_k_models[callback.kth_best_model_path])
    better = score < kth if callback.mode == "min" else score > kth  # NaN: never
    # Lightning's check_monitor_top_k: the ranks decide together, a save only where every rank's
    # value enters (a metric logged without sync_dist differs by rank); one rank saving alone
    # would wait for ever in the save's collectives.
    agreed = trainer.runtime.all_reduce(torch.tensor(float(better), device=trainer.runtime.device), "min")
    return bool(agreed.item() > 0)


def _update_ranking(callback: Any, full: bool) -> None:
    # min()/max() keep the first of equal scores, and every rank inserted in the same order.
    # The k-th is Lightning's: named only once the top k is full.
    worse, better = (max, min) if callback.mode == "min" else (min, max)
    scores = {path: float(score) for path, score in callback.best_k_models.items()}
    if full:
        callback.kth_best_model_path = worse(scores, key=scores.__getitem__)
        callback.kth_value = callback.best_k_models[callback.kth_best_model_path]
    callback.best_model_path = better(scores, key=scores.__getitem__)
    callback._best_score = callback.best_k_models[callback.best_model_path]
