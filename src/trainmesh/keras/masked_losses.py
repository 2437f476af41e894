"""Compiled losses that are no mean over the batch's samples, refused under several processes where the run
cannot make them exact.

Keras applies a mask to a loss two ways: the model's output carries a Keras mask (``Embedding(mask_zero=True)``,
``Masking``, propagated through ``LSTM(return_sequences=True)``, ``Dense``...), or the loss is given
``ignore_class``. Its default reduction then divides by the batch's count of unmasked positions, a ratio over the
whole batch: the run divides by the global batch's count (masked_counts.py), Keras' own ``apply_mask`` routed.
That route sits in Keras' ``Loss.__call__``; a step of the program's own (``train_step`` or ``compute_loss``
overridden, a loss or forward pass of its own: step_probe.needs_probe) is probed on halves of a batch on one
process, where each half divides by its own count, so a masked loss there is refused before any process starts,
naming the mask's source and the fix.

Keras' ``Dice`` and ``Tversky`` losses at their default ``axis=None`` are one ratio of sums over every
sample of the batch, and ``Circle`` compares the batch's samples in pairs: no mean over the samples either
(keras.losses.Dice() on a 2 x 16 segmentation: weights 6.3e-3 apart, predict 4.3e-3, silently). Refused
(``Dice``/``Tversky`` with an ``axis`` leaving out the batch axis are per-sample, and pass).

The mask is found by calling a built model (inference, as Keras' ``model(x)``) on two samples of the data (for a
model built only by ``fit``, when training begins). Variables and torch's generator are left as they were.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from trainmesh.keras.added_losses import two_samples
from trainmesh.keras.backend import require_keras
from trainmesh.keras.batch_metrics import probe_batch
from trainmesh.keras.batches import is_batches
from trainmesh.keras.data import leaves
from trainmesh.keras.step_probe import needs_probe

_WHY = (
    "Keras' loss then divides by the count of unmasked positions in the batch (a mean over those positions, "
    "not over the samples). trainmesh divides Keras' own compiled loss by the global batch's count, but "
    "{model} has a step of its own (train_step or compute_loss overridden, or a loss or forward pass of the "
    "program's own), which trainmesh checks on halves of a batch, each dividing by its own count: under {world} "
    "processes the run could train and differ from one process's, silently. "
)


def refuse_masked_losses(model: Any, x: Any, world: int) -> None:
    """Under several processes: a compiled loss over the whole batch, or reduced over a mask in a step of the
    program's own, refused (the module's doc)."""
    if world == 1 or getattr(model, "loss", None) is None:
        return
    own_step = needs_probe(model)
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
        ignored = getattr(loss, "ignore_class", None)
        if ignored is not None and own_step:
            raise ValueError(
                f"the loss {type(loss).__name__}(ignore_class={ignored!r}) leaves out the positions labelled "
                f"{ignored!r}: "
                + _WHY.format(world=world, model=type(model).__name__)
                + "Give the loss no ignore_class and weigh the "
                f"positions instead (sample_weight = (y != {ignored!r}), of y's shape: Keras' default reduction "
                "then divides by every position, a mean over the samples), or run on one process (devices=1)"
            )
    source = _masked_output(model, x) if own_step else None
    if source is not None:
        raise ValueError(
            f"the model's output carries a Keras mask (from {source}), which Keras applies to the compiled "
            "loss: "
            + _WHY.format(world=world, model=type(model).__name__)
            + "Keep the mask from the loss (end the model with a layer that "
            "does not propagate it, and pass the mask as sample_weight of the targets' shape: Keras' default "
            "reduction then divides by every position, a mean over the samples), or run on one process (devices=1)"
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


def _masked_output(model: Any, x: Any) -> str | None:
    """What gives the model's output its mask (a layer's description), or None: no mask, or not probed
    (an unbuilt model, data the probe cannot index, a model the probe cannot call)."""
    keras = require_keras()
    from keras.src.backend.common.masking import get_keras_mask  # what Keras' Loss.__call__ reads

    if not getattr(model, "built", False):
        return None
    inputs = two_samples(x)
    if inputs is None and is_batches(x):  # a DataLoader: its first samples, collated
        first = probe_batch(x, None)
        inputs = None if first is None else first[0]
    if inputs is None:
        return None
    variables = list(model.variables)
    saved = [variable.value.detach().clone() for variable in variables]
    generator = torch.get_rng_state()
    try:
        with torch.no_grad():
            outputs = keras.tree.flatten(model(inputs, training=False))
    except Exception:  # noqa: BLE001 -- a model the probe cannot call: the run meets its error itself
        return None
    finally:
        for variable, value in zip(variables, saved, strict=True):
            variable.assign(value)
        torch.set_rng_state(generator)
    if all(get_keras_mask(output) is None for output in outputs):
        return None
    for layer in model._flatten_layers(include_self=False):
        if getattr(layer, "mask_zero", False):
            return f"{type(layer).__name__}(mask_zero=True) {layer.name!r}"
        if isinstance(layer, keras.layers.Masking):
            return f"Masking {layer.name!r}"
    return "a layer computing a mask"


def checking_callback(world: int, x: Any) -> Any:
    """The Keras callback checking, when training begins, a model that ``fit`` built (not checked before start)."""
    keras = require_keras()

    class MaskedLossCheck(keras.callbacks.Callback):  # type: ignore[name-defined]
        def on_train_begin(self, logs: Any = None) -> None:
            refuse_masked_losses(self.model, x, world)

    return MaskedLossCheck()
