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
    keras_masks = _keras_mask_operations(model)
    for operation in getattr(model, "operations", None) or ():
        if not isinstance(operation, keras.layers.Layer) and id(operation) not in keras_masks:
            return f"keras.ops.{type(operation).__name__} in the functional model"  # applied to the model's tensors
    return None


def _keras_mask_operations(model: Any) -> set[int]:
    """The ids of the functional model's ``keras.ops`` nodes that are a Keras layer's own mask computation.

    Called on a symbolic tensor, a layer's ``compute_mask`` (``Embedding(mask_zero=True)``'s ``not_equal(inputs,
    0)``, ``Masking``'s ``any(not_equal(...))``) is recorded in the graph as ``keras.ops`` nodes of their own. They
    are Keras' code, sample by sample: every functional model with such a mask was probed as a forward pass of its
    own before. Each layer's node whose output mask is new (not one of its inputs): the ops leading from its
    inputs to that mask, found backward from the mask and only those (an op reading anything else is not
    the layer's)."""
    keras = require_keras()
    found: set[int] = set()
    for layer in getattr(model, "operations", None) or ():
        if not isinstance(layer, keras.layers.Layer) or own_override(layer, "compute_mask"):
            continue
        for node in getattr(layer, "_inbound_nodes", ()):
            inputs = {id(tensor) for tensor in node.input_tensors}
            masks = {getattr(tensor, "_keras_mask", None) for tensor in node.output_tensors} - {None}
            for mask in masks:
                if id(mask) not in inputs:
                    found |= _leading_to(mask, inputs, keras.layers.Layer)
    return found


def _leading_to(mask: Any, inputs: set[int], layer_class: type) -> set[int]:
    """The ops computing ``mask`` from the tensors ``inputs`` only, or none where it reads anything else."""
    operations: set[int] = set()
    pending = [mask]
    while pending:
        tensor = pending.pop()
        if id(tensor) in inputs:
            continue
        history = getattr(tensor, "_keras_history", None)
        if history is None or history.operation is None or isinstance(history.operation, layer_class):
            return set()
        operations.add(id(history.operation))
        pending.extend(history.operation._inbound_nodes[history.node_index].input_tensors)
    return operations


def added_in_training(model: Any) -> str | None:
    """The first layer of the program's own whose ``call`` added a loss (``add_loss``) in the model's last call
    (the step probe's, in training), as ``Name.call``; None where none did. Keras clears a layer's added losses
    at the start of the model's next call, not after one, so they are still there when the probe's reason is made."""
    for layer in model._flatten_layers(include_self=True):
        if own_override(layer, "call") and getattr(layer, "_losses", None):
            return f"{type(layer).__name__}.call"
    return None


def forward_reason(model: Any, difference: float, world: int, samples: int) -> str:
    """Why a model whose forward pass of its own combines the batch's samples is refused (step_probe.py).

    A loss a layer of its own adds only in training (``if training: self.add_loss(ops.sum(...))``) is not seen by
    added_losses.py's probe (an inference call) and shows here; before, its refusal spoke of an output combining
    the samples (``ops.tensordot``) only, which a program adding a summed penalty does not do."""
    added = added_in_training(model)
    if added is None:
        what, fix = "combines the samples of a batch", ""
    else:
        what = f"combines the samples of a batch, or the loss it adds in training (add_loss in {added}) is no mean over them"
        fix = (
            "Make the added loss a mean over the batch (ops.mean instead of ops.sum, or divide by the batch size, as "
            "Keras' activity_regularizer does; a sum weighs 1/N of it under N processes), and "
        )
    return (
        f"the model's forward pass ({forward_of_its_own(model)}) {what}: on the first "
        f"{samples} samples of the training data its gradients differ from the mean of its gradients on each half by "
        f"{difference:.2e} of their norm (an output computed from several samples, such as "
        f"ops.tensordot(a, b, 2) contracting the batch axis, or a statistic over the batch). Under {world} "
        "processes each one computes it from its own part of every global batch: the run would train and differ "
        f"from one process's, silently. {fix}{'c' if fix else 'C'}ompute each sample's output from that sample alone "
        "(ops.sum(a * b, axis=1, keepdims=True) for a per-sample dot product), or run on one process"
    )
