"""Losses a model adds in its call (``add_loss``) that are not a mean over the batch: refused before start.

Keras adds each ``add_loss`` value to the compiled loss as it is. Under ``N`` processes each process
computes it on its own part of every global batch, and trainmesh averages the processes' gradients
(each weighted by its share of the batch), which reproduces one process's gradient for a term that
is a mean over the batch's samples (a compiled loss, Keras' ``activity_regularizer``, which Keras
divides by the batch size) or does not depend on the batch (a weight regularizer). A term that is a
sum over the samples (keras-io's ``ActivityRegularizationLayer``: ``self.add_loss(ops.sum(inputs) *
0.1)``) would weigh ``1/N`` of what it weighs in one process, and a batch statistic would be
another number: the run would differ from one process's, silently, and so would the loss it logs.

So before any process starts, a built model is called (inference, as Keras' ``model(x)``) on two
samples of the data, then on each alone, and each added loss must be the mean of its two values
alone; one that is not is refused with its numbers. The probe leaves every variable of the model
(seed generators' states included) and torch's generator as they were. Not probed: an unbuilt
model, data other than arrays or a PyDataset, a model the probe cannot call.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trainmesh.keras.backend import require_keras


def two_samples(x: Any) -> Any:
    """The inputs of the first two samples of ``x`` (arrays or a PyDataset's first batch); None: other data."""
    keras = require_keras()
    if isinstance(x, keras.utils.PyDataset):
        try:
            batch = x[0]
        except Exception:  # noqa: BLE001 -- a PyDataset the probe cannot index: not probed
            return None
        x = batch[0] if isinstance(batch, tuple) else batch
    leaves = keras.tree.flatten(x) if x is not None else []
    if not leaves or not all(hasattr(leaf, "shape") and len(leaf.shape) and len(leaf) >= 2 for leaf in leaves):
        return None
    return keras.tree.map_structure(lambda leaf: np.asarray(leaf[:2]), x)


class _CannotCall(Exception):  # noqa: N818 -- the model's own call failed on the probe's samples
    """The model raised, called on the probe's samples (one taking one batch size only): not probed."""


def _added(model: Any, inputs: Any) -> list[float]:
    keras = require_keras()
    try:
        model(inputs)
    except Exception as error:  # noqa: BLE001 -- the program's own call, whatever it raises: not probed
        raise _CannotCall from error
    return [float(keras.ops.convert_to_numpy(keras.ops.sum(loss))) for loss in model.losses]


def probe(model: Any, inputs: Any) -> tuple[int, float, float, float] | None:
    """The first added loss that is not the mean of its values on each sample alone, as (index, on
    both, on the first, on the second); None when every one is (or the probe cannot call the model)."""
    keras = require_keras()
    variables = list(model.variables)
    saved = [variable.value.detach().clone() for variable in variables]
    generator = torch.get_rng_state()
    try:
        both = _added(model, inputs)
        if not both:
            return None
        first = _added(model, keras.tree.map_structure(lambda leaf: leaf[:1], inputs))
        second = _added(model, keras.tree.map_structure(lambda leaf: leaf[1:2], inputs))
    except _CannotCall:  # a model the probe cannot call: not probed (an error of the probe's own surfaces)
        return None
    finally:
        for variable, value in zip(variables, saved, strict=True):
            variable.assign(value)
        torch.set_rng_state(generator)
    if not len(both) == len(first) == len(second):
        return None
    for index, (pair, one, two) in enumerate(zip(both, first, second, strict=True)):
        if not np.isclose(pair, (one + two) / 2, rtol=1e-4, atol=1e-6):
            return index, pair, one, two
    return None


def refuse_batch_sums(model: Any, x: Any, world: int) -> None:
    """Under several processes: an added loss that is not a mean over the batch's samples, refused."""
    if world == 1 or not getattr(model, "built", False):
        return
    inputs = two_samples(x)
    found = probe(model, inputs) if inputs is not None else None
    if found is None:
        return
    index, pair, one, two = found
    kind = (
        "a sum over the samples" if np.isclose(pair, one + two, rtol=1e-4, atol=1e-6) else "not a mean over the batch"
    )
    layer = _activity_regularized(model, index)
    fix = (
        "Make it a mean over the batch (ops.mean instead of ops.sum, or divide by the batch size, as Keras' "
        "activity_regularizer does), or run on one process"
    )
    if layer is not None:  # Keras divides the regularizer's value by the batch size: ops.mean would divide twice
        fix = (
            f"It is the activity_regularizer of layer {layer.name!r} ({_named(layer.activity_regularizer)}), "
            "whose value Keras divides by the batch size: return a sum over the samples of terms each of one sample "
            "alone (a term coupling two samples, such as ops.tensordot over the batch axis, is no mean whatever "
            "its reduction), or run on one process"
        )
    raise ValueError(
        f"the model adds a loss in its call (add_loss; model.losses[{index}]) that is {kind}: on two samples together it is {pair:.6g}, on each alone {one:.6g} and {two:.6g} (a mean would be "
        f"{(one + two) / 2:.6g}). Under {world} processes each process adds it for its own part of every global "
        "batch and the processes' gradients are averaged, so this term would weigh other than in one process "
        f"at the global batch (a sum: 1/N of it), silently, and so would the loss logged. {fix}"
    )


def _activity_regularized(model: Any, index: int) -> Any:
    """The layer whose own losses hold ``model.losses[index]`` (in the order of Keras' ``Layer.losses``), where
    it has an activity_regularizer; else None. Before, keras-io's PointNet (an OrthogonalRegularizer) was told
    to use ops.mean, which Keras' division by the batch size makes no mean either (k-progs7)."""
    for layer in [model, *model._flatten_layers(include_self=False)]:
        own = len(layer._get_own_losses())
        if index < own:
            return layer if getattr(layer, "activity_regularizer", None) is not None else None
        index -= own
    return None


def _named(regularizer: Any) -> str:
    """A regularizer function's name, or its class's."""
    return getattr(regularizer, "__name__", None) or type(regularizer).__name__
