"""A forward pass of the program's own code: probed under several processes, as a step of its own is.

Keras' own layers compute each sample's outputs from that sample alone (BatchNormalization, the one that
does not, gets the global batch's moments: batch_statistics.py). A ``call`` of the program's own (a
subclassed model or layer), a ``Lambda`` layer's function of its own, or a ``keras.ops`` function applied
in a functional model may combine the samples of a batch: keras-io's collaborative filtering example
(structured_data/collaborative_filtering_movielens.py) adds ``ops.tensordot(user_vector, movie_vector, 2)``
to every prediction, which contracts the batch axis too (one number from all the batch's samples). Under
``N`` processes each computes it from its own part of the batch, and the run trained apart from Keras'
own fit at the global batch (History 0.25 apart at 2 x 16), silently. So step_probe.py probes such a
model's step (whole batch against its halves) as it probes a ``train_step`` of the program's own: a
forward pass that keeps the samples apart passes, one that combines them is refused before training.
"""

from __future__ import annotations

from typing import Any

from trainmesh.keras.backend import require_keras


def own(thing: Any) -> bool:
    """Whether ``thing`` (a class, a function) is the program's own, not Keras'."""
    return (getattr(thing, "__module__", None) or "keras").split(".")[0] != "keras"


def own_override(obj: Any, name: str) -> bool:
    """Whether a class of the program's own in ``obj``'s MRO defines ``name`` (before Keras' classes)."""
    for cls in type(obj).__mro__:
        if not own(cls):
            return False
        if name in vars(cls):
            return True
    return False


def forward_of_its_own(model: Any) -> str | None:
    """What of the model's forward pass is the program's own code (its name, for the reason), or None."""
    keras = require_keras()
    for layer in model._flatten_layers(include_self=True):
        if own_override(layer, "call"):
            return f"{type(layer).__name__}.call"
        function = getattr(layer, "function", None)
        if isinstance(layer, keras.layers.Lambda) and own(function):
            return f"the Lambda layer's {getattr(function, '__name__', 'function')}"
    for operation in getattr(model, "operations", None) or ():
        if not isinstance(operation, keras.layers.Layer):  # keras.ops applied to a functional model's tensors
            return f"keras.ops.{type(operation).__name__} in the functional model"
    return None


def forward_reason(model: Any, difference: float, world: int, samples: int) -> str:
    """Why a model whose forward pass of its own combines the batch's samples is refused (step_probe.py)."""
    return (
        f"the model's forward pass ({forward_of_its_own(model)}) combines the samples of a batch: on the first "
        f"{samples} samples of the training data its gradients differ from the mean of its gradients on each half by "
        f"{difference:.2e} of their norm (an output computed from several samples, such as "
        f"ops.tensordot(a, b, 2) contracting the batch axis, or a statistic over the batch). Under {world} "
        "processes each one computes it from its own part of every global batch: the run would train and differ "
        "from one process's, silently. Compute each sample's output from that sample alone (ops.sum(a * b, "
        "axis=1, keepdims=True) for a per-sample dot product), or run on one process"
    )
