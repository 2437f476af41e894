"""Compiled losses over the whole batch at once (Keras' Dice, Tversky, Circle): refused under several processes.

Keras' ``Dice`` and ``Tversky`` losses at their default ``axis=None`` are one ratio of sums over every
sample of the batch, and ``Circle`` compares the batch's samples in pairs: no mean over the samples
(keras.losses.Dice() on a 2 x 16 segmentation: weights 6.3e-3 apart, predict 4.3e-3, silently). Refused
before any process starts (and, for a model built only by ``fit``, when training begins), naming the fix
(``Dice``/``Tversky`` with an ``axis`` leaving out the batch axis are per-sample, and pass).

A loss Keras reduces over a mask (``Embedding(mask_zero=True)``, ``Masking``, ``ignore_class``) is also a ratio
over the batch (its unmasked count), but one the run makes exact: masked_counts.py divides it by the global
batch's count, and a step of the program's own is probed with the whole batch's count (step_probe.py).
"""

from __future__ import annotations

import inspect
from typing import Any

from trainmesh.keras.backend import require_keras
from trainmesh.keras.data import leaves


def refuse_batch_wide_losses(model: Any, world: int) -> None:
    """Under several processes: a compiled loss over the whole batch, refused (the module's doc)."""
    if world == 1 or getattr(model, "loss", None) is None:
        return
    losses = leaves(model.loss) if isinstance(model.loss, (list, tuple, dict)) else [model.loss]
    for loss in losses:
        wide = _batch_wide(loss)
        if wide:
            raise ValueError(
                f"the loss {wide} is computed over the whole batch at once, not as a mean of per-sample values. "
                f"Under {world} processes each process computes it on its own part of every global batch and "
                "trainmesh averages the processes' gradients, which is one process's only for a mean over the "
                "samples: the run would train and differ from one process's, silently. Give Dice/Tversky an axis "
                "without the batch axis (axis=(1, 2, 3) for images: one value per sample, averaged), or run on one "
                "process (devices=1)"
            )


_BATCH_WIDE = {"dice": "Dice", "tversky": "Tversky", "circle": "Circle"}  # Keras' losses over the whole batch


def _batch_wide(loss: Any) -> str | None:
    """How Keras' loss ``loss`` reads when it is one value over the whole batch (its name), else None."""
    if isinstance(loss, str) or (inspect.isfunction(loss) and loss.__module__.startswith("keras")):
        name = loss if isinstance(loss, str) else loss.__name__
        if name.lower() in _BATCH_WIDE:  # the function or its name: the default axis=None
            return f"{_BATCH_WIDE[name.lower()]} ({name!r})"
    cls = type(loss).__name__
    if cls not in _BATCH_WIDE.values() or not type(loss).__module__.startswith("keras"):
        return None
    axis = getattr(loss, "axis", None)
    axes = (axis,) if isinstance(axis, int) else tuple(axis or ())
    if cls != "Circle" and axis is not None and 0 not in axes:
        return None
    return f"{cls}(axis={axis!r})" if cls != "Circle" else "Circle"


def checking_callback(world: int) -> Any:
    """The Keras callback checking, when training begins, a model that ``fit`` built (not checked before start)."""
    keras = require_keras()

    class BatchWideLossCheck(keras.callbacks.Callback):  # type: ignore[name-defined]
        def on_train_begin(self, logs: Any = None) -> None:
            refuse_batch_wide_losses(self.model, world)

    return BatchWideLossCheck()
