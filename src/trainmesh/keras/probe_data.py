"""The first samples of the training data, as the probes before start read them (batch_metrics.py,
metric_states.py, step_probe.py): arrays, a PyDataset's first batch or a map-style DataLoader's first
samples (read by index: no loader is iterated, so no generator draws); and the step probe's batch, those
samples as Keras' fit hands them to ``train_step`` (its own data adapter, a batch of them)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trainmesh.keras.backend import require_keras

PROBED_SAMPLES = 16  # enough samples that a pair-coupling metric scores some pair


def probe_batch(x: Any, y: Any, samples: int = PROBED_SAMPLES) -> tuple[Any, Any] | None:
    """The inputs and targets of the first samples of the training data; None: data not probed."""
    keras = require_keras()
    from trainmesh.keras.batches import is_batches, is_py_dataset

    if is_batches(x):
        try:
            batch = _leading(x, samples) if is_py_dataset(x) else x.collate_fn([x.dataset[i] for i in range(samples)])
        except Exception:  # noqa: BLE001 -- data the probe cannot index (an iterable dataset): not probed
            return None
        if not isinstance(batch, (tuple, list)) or len(batch) < 2:
            return None
        x, y = batch[0], batch[1]
    leaves = keras.tree.flatten((x, y)) if x is not None and y is not None else []
    if not leaves or not all(hasattr(leaf, "shape") and len(leaf.shape) and len(leaf) >= 2 for leaf in leaves):
        return None
    take = keras.tree.map_structure(lambda leaf: np.asarray(leaf[:samples]), (x, y))
    return take[0], take[1]


def _leading(data: Any, samples: int) -> Any:
    """A PyDataset's first batch, or its first batches joined where the first has fewer than ``samples`` rows
    (the step probe at twice each process's batch: probe_sizes.py)."""
    keras = require_keras()
    batches, count = [data[0]], data.num_batches

    def rows() -> int:
        return sum(len(keras.tree.flatten(batch)[0]) for batch in batches)

    while rows() < samples and len(batches) < (samples if count is None else min(count, samples)):
        batches.append(data[len(batches)])
    if len(batches) == 1:
        return batches[0]
    return keras.tree.map_structure(lambda *leaves: np.concatenate([np.asarray(leaf) for leaf in leaves]), *batches)


def batch_rows(data: Any) -> int | None:
    """Each process's batch size reading ``data`` (a PyDataset or a DataLoader) under several processes: each
    reads whole batches of it (batches.py), so a PyDataset's first batch's rows, a DataLoader's ``batch_size``
    (None with a batch sampler of its own)."""
    from trainmesh.keras.batches import is_py_dataset

    if is_py_dataset(data):
        return len(require_keras().tree.flatten(data[0])[0])
    return getattr(data, "batch_size", None)


def _first_samples(x: Any, y: Any, sample_weight: Any, samples: int) -> tuple[Any, Any, Any] | None:
    """The first ``PROBED_SAMPLES`` samples of the training data (arrays, a PyDataset's or a map-style
    DataLoader's first samples; ``y`` may be None with arrays, as keras-io's GAN fits); None: not probed."""
    keras = require_keras()
    from trainmesh.keras.batches import is_batches

    if (
        is_batches(x) and (inputs := _inputs_only(x, samples)) is not None
    ):  # keras-io's siamese triplets, an autoencoder's
        x, y = inputs, None
    elif is_batches(x) or y is not None:
        batch = probe_batch(x, y, samples)
        return None if batch is None else (*batch, None if is_batches(x) else sample_weight)
    leaves = keras.tree.flatten(x) if x is not None else []
    if not leaves or not all(hasattr(leaf, "shape") and len(leaf.shape) and len(leaf) >= 2 for leaf in leaves):
        return None
    return keras.tree.map_structure(lambda leaf: np.asarray(leaf[:samples]), x), None, sample_weight


def _inputs_only(data: Any, samples: int) -> Any:
    """The inputs of the first batch of a PyDataset or a DataLoader yielding inputs alone (``x`` or ``(x,)``, as
    Keras reads a batch: no targets), else None. Before, such data was not probed: a triplet loss summed over
    the batch (keras-io's siamese network: TF's tape differentiates the sum) trained at 2 processes with half
    the gradient, silently."""
    from trainmesh.keras.batches import is_py_dataset

    try:
        batch = (
            _leading(data, samples)
            if is_py_dataset(data)
            else data.collate_fn([data.dataset[i] for i in range(samples)])
        )
    except Exception:  # noqa: BLE001 -- data the probe cannot index (an iterable dataset): not probed
        return None
    if isinstance(batch, tuple) and len(batch) == 1:
        return batch[0]
    return None if isinstance(batch, (tuple, list, dict)) else batch


def first_batch(x: Any, y: Any, sample_weight: Any, class_weight: Any, samples: int = PROBED_SAMPLES) -> Any:
    """The first ``samples`` samples (an even count, 4 at least) as Keras' fit hands a batch of them to ``train_step``."""
    from keras.src.trainers.data_adapters import get_data_adapter

    keras = require_keras()
    found = _first_samples(x, y, sample_weight, samples)
    if found is None:
        return None
    inputs, targets, weights = found
    count = min(len(leaf) for leaf in keras.tree.flatten(inputs)) // 2 * 2
    if count < 4:
        return None
    inputs, targets = keras.tree.map_structure(lambda leaf: None if leaf is None else leaf[:count], (inputs, targets))
    weights = None if weights is None else np.asarray(weights[:count])
    adapter = get_data_adapter(inputs, targets, weights, batch_size=count, shuffle=False, class_weight=class_weight)
    generator = torch.get_rng_state()
    try:
        return next(iter(adapter.get_torch_dataloader()))
    finally:  # torch's DataLoader draws its workers' base seed from it
        torch.set_rng_state(generator)
