"""The first samples of the training data, as the probes before start read them (batch_metrics.py,
metric_states.py, step_probe.py): arrays, a PyDataset's first batch or a map-style DataLoader's first
samples (read by index: no loader is iterated, so no generator draws)."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainmesh.keras.backend import require_keras

PROBED_SAMPLES = 16  # enough samples that a pair-coupling metric scores some pair


def probe_batch(x: Any, y: Any) -> tuple[Any, Any] | None:
    """The inputs and targets of the first samples of the training data; None: data not probed."""
    keras = require_keras()
    from trainmesh.keras.batches import is_batches, is_py_dataset

    if is_batches(x):
        try:
            batch = x[0] if is_py_dataset(x) else x.collate_fn([x.dataset[i] for i in range(PROBED_SAMPLES)])
        except Exception:  # noqa: BLE001 -- data the probe cannot index (an iterable dataset): not probed
            return None
        if not isinstance(batch, (tuple, list)) or len(batch) < 2:
            return None
        x, y = batch[0], batch[1]
    leaves = keras.tree.flatten((x, y)) if x is not None and y is not None else []
    if not leaves or not all(hasattr(leaf, "shape") and len(leaf.shape) and len(leaf) >= 2 for leaf in leaves):
        return None
    take = keras.tree.map_structure(lambda leaf: np.asarray(leaf[:PROBED_SAMPLES]), (x, y))
    return take[0], take[1]
