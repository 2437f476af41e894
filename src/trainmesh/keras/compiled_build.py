"""The compiled metrics and loss a ``ddp_spawn`` worker's model arrives without, built as the launching
process had them.

Keras builds a model's compiled metrics and loss (``_compile_metrics``, ``_compile_loss``) at its first
``fit``/``evaluate``, from the specs of a batch: where they are unbuilt, Keras' ``_symbolic_build`` takes
the first batch of the call's data by iterating it, and a DataLoader iterated draws a seed from torch's
generator. Keras pickles a model (to spawned workers) as its ``.keras`` file, which keeps neither: a
model whose compiled metrics the launching process had built (a Keras ``evaluate`` or ``fit`` of its own
before ``tk.fit``) arrived with them unbuilt, and each worker's ``fit`` drew that seed where one process's
does not, so every later shuffle and Dropout mask was another: 2 processes of 16 trained 9.3e-2 apart
from Keras' own fit at 32, silently (``ddp_fork``, which does not pickle the model: 3e-8).

So the model travels with the first two samples of the call's data (as Keras' data adapter yields a batch
of them: ``(x, y, sample_weight)``), and the arrived model builds what the launching process had built
from their specs, as Keras builds from a batch's: nothing drawn, every generator left as it was.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from trainmesh.keras import global_seed
from trainmesh.keras.backend import require_keras

SAMPLES = 2  # only the specs count: shapes past the first dimension and dtypes


def built_parts(model: Any) -> bool:
    """Whether the model's compiled metrics or loss are built (by a Keras fit or evaluate before)."""
    parts = (getattr(model, "_compile_metrics", None), getattr(model, "_compile_loss", None))
    return any(part is not None and part.built for part in parts)


def unbuilt_parts(model: Any) -> bool:
    parts = (getattr(model, "_compile_metrics", None), getattr(model, "_compile_loss", None))
    return any(part is not None and not part.built for part in parts)


def fixed_batch_size(model: Any) -> int | None:
    """The batch size the model's inputs declare (``keras.Input(shape, batch_size=16)``, as a stateful RNN
    needs), or None. Keras builds such a model from its first batch, of that size; built from
    :data:`SAMPLES` samples, a stateful SimpleRNN raised "the batch size of the input sequences must be
    the same as the batch size of the initial state" (ddp_spawn's evaluate after fit, which Keras runs)."""
    sizes = {tensor.shape[0] for tensor in getattr(model, "inputs", None) or [] if len(tensor.shape)}
    return next(iter(sizes)) if len(sizes) == 1 and None not in sizes else None


def first_batch(x: Any, y: Any = None, sample_weight: Any = None, *, model: Any = None) -> Any:
    """The first samples of the data as Keras' data adapter hands a batch of them to a step: arrays sliced
    (``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``), a PyDataset's first batch, a map-style
    DataLoader's first samples collated; None where none can be taken without iterating the data.
    :data:`SAMPLES` of them, or as many as ``model``'s inputs declare as their batch size."""
    keras = require_keras()
    samples = (fixed_batch_size(model) if model is not None else None) or SAMPLES
    from torch.utils.data import DataLoader, IterableDataset

    from trainmesh.keras.batches import is_py_dataset

    try:
        if is_py_dataset(x):
            return x[0]
        if isinstance(x, DataLoader):
            if isinstance(x.dataset, IterableDataset):
                return None
            return x.collate_fn([x.dataset[i] for i in range(min(samples, len(x.dataset)))])  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 -- data that cannot be indexed: None, said by the caller
        return None
    parts = tuple(part for part in (x, y, sample_weight) if part is not None)
    leaves = keras.tree.flatten(parts)
    if not parts or not all(hasattr(leaf, "shape") and len(leaf.shape) for leaf in leaves):
        return None
    return keras.tree.map_structure(lambda leaf: leaf[:samples], parts)


def build_compiled(model: Any, batch: Any) -> None:
    """Keras' own build of the model's compiled metrics and loss from ``batch``'s specs (its
    ``_symbolic_build``, given the batch: the data is not iterated); every generator left as it was."""
    if batch is None or not unbuilt_parts(model):
        return
    generators = (torch.get_rng_state(), np.random.get_state(), random.getstate(), global_seed.state())
    try:
        model._symbolic_build(data_batch=batch)
    finally:
        torch.set_rng_state(generators[0])
        np.random.set_state(generators[1])
        random.setstate(generators[2])
        global_seed.set_state(generators[3])
