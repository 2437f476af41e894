"""Every random draw of a Keras step at the global batch: Keras' own functions (draws.py) and
torch's (torch_draws.py, which builds on draws.py), composed here so neither imports the other's user."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from trainmesh.keras import draws
from trainmesh.keras.backend import require_keras
from trainmesh.keras.routes import steps_through
from trainmesh.keras.tensor_draws import tensor_methods_at_the_global_batch
from trainmesh.keras.torch_draws import torch_at_the_global_batch


@contextlib.contextmanager
def at_the_global_batch(rows: draws.StepRows) -> Iterator[None]:
    """Keras' and torch's random functions map batch-shaped draws to ``rows`` within the block."""
    # torch's own functions drawn in a step of the program's own, inside Keras' (as before the split)
    with draws.keras_at_the_global_batch(rows), torch_at_the_global_batch(rows):
        with tensor_methods_at_the_global_batch(rows):  # a tensor's own draws (x.normal_())
            yield


@contextlib.contextmanager
def predicting(model: Any, rows: draws.StepRows, shares: tuple[int, ...] | None, batch_size: int) -> Iterator[None]:
    """``model.predict`` of split arrays (``shares``: samples per process) maps its steps' draws; of
    batches (``shares`` None: runs of batches, at other generator states) refuses batch-shaped ones."""
    if rows.runtime.world_size == 1:
        yield
        return
    steps = [0]

    def predict_step(data: Any, keras_step: Callable[[Any], Any]) -> Any:
        local = _leading(data)
        if shares is not None:
            rows.begin(local, draws.plan_sizes(shares, batch_size, steps[0]), blocks=False)
        else:
            rows.begin(local, None, blocks=False, refusal=draws.PREDICTING_BATCHES)
        try:
            return keras_step(data)
        finally:
            steps[0] += 1
            rows.end()

    # Keras' make_predict_function, routed for this model (routes.py): the model itself is left as it is
    with steps_through(model, {"predict": predict_step}), at_the_global_batch(rows):
        yield


def _leading(data: Any) -> int:
    x = data[0] if isinstance(data, tuple) else data
    first = next(leaf for leaf in require_keras().tree.flatten(x) if leaf is not None)
    return int(first.shape[0])
