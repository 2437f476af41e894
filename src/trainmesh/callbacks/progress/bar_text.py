"""What a progress bar writes, beside the bar itself: the metrics (three significant digits), Lightning's
standard items (``v_num``), the epoch's description, a duration, and a batch count rich can take."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from trainmesh.trainer_view import TrainerView


def format_metrics(metrics: Mapping[str, Any]) -> str:
    """Render metrics compactly, three significant digits each.

    >>> format_metrics({"loss": 0.23141, "val_acc": 0.95, "epoch": 3})
    'loss=0.231 val_acc=0.95 epoch=3'
    """
    return " ".join(f"{key}={_format_value(value)}" for key, value in metrics.items())


def _format_value(value: Any) -> str:
    if isinstance(value, int):
        return str(value)
    try:
        return f"{value:.3g}"
    except (TypeError, ValueError):
        return str(value)


def known_total(count: int | float | None) -> int | None:
    # rich takes total=None for "unknown": an iterable dataset has no length.
    if count is None or (isinstance(count, float) and math.isinf(count)):
        return None
    return int(count)


def get_standard_metrics(trainer: TrainerView) -> dict[str, int | str]:
    """Lightning's standard bar items: ``v_num``, the loggers' version (several loggers' versions
    joined by ``_``; a string version's last 4 characters), none without a logger or a version."""
    loggers = list(getattr(trainer, "loggers", None) or ())  # a stand-in trainer may have none
    if not loggers:
        return {}
    version = loggers[0].version if len(loggers) == 1 else "_".join(dict.fromkeys(str(lg.version) for lg in loggers))
    if version in ("", None):
        return {}
    return {"v_num": version[-4:] if isinstance(version, str) else version}


def epoch_description(trainer: TrainerView) -> str:
    # Lightning's convention (its RichProgressBar): epochs counted from 0, as current_epoch, the
    # checkpoint names and the messages count them, so "Epoch 4/4" is the last of max_epochs=5.
    epoch = trainer.current_epoch
    max_epochs = getattr(trainer, "max_epochs", None)
    return f"Epoch {epoch}/{max_epochs - 1}" if max_epochs is not None and max_epochs > 0 else f"Epoch {epoch}"


def format_duration(seconds: float) -> str:
    return str(timedelta(seconds=int(seconds)))
