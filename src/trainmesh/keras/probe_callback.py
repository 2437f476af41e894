"""The Keras callback that runs the step probe (step_probe.py) when training begins, and again at the first
epoch's end where a variable was moved by hand during it (hand_updates.py); every process raises rank 0's
reason."""

from __future__ import annotations

from typing import Any

from trainmesh.keras import hand_updates
from trainmesh.keras.backend import require_keras
from trainmesh.keras.batches import is_batches
from trainmesh.keras.own_forward import own_override
from trainmesh.keras.step_probe import needs_probe, refusal


def probing_callback(runtime: Any, x: Any, y: Any, fit_kwargs: dict[str, Any]) -> Any:
    """The Keras callback (put it first) that probes the step when training begins, once Keras' ``fit``
    has built the model, its compiled loss and metrics and the optimizer, and before any other
    callback (sync.py's restores a preempted run's state after it) and any training step. ``x``,
    ``y``: the training data before it is split over the processes."""
    keras = require_keras()
    weights = (fit_kwargs.get("sample_weight"), fit_kwargs.get("class_weight"))
    each = fit_kwargs.get("batch_size") or (None if is_batches(x) else 32)  # each process's batch (Keras' default)

    class StepProbe(keras.callbacks.Callback):  # type: ignore[name-defined]
        begun: Any = None

        def on_train_begin(self, logs: Any = None) -> None:
            refuse_non_mean_step(runtime, self.model, x, y, *weights, each)
            self.begun = hand_updates.values(self.model) if runtime.world_size > 1 and needs_probe(self.model) else None

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:  # the first: a variable updated from later on
            begun, self.begun = self.begun, None
            if begun is not None and runtime.broadcast(hand_updates.moved_by_hand(self.model, begun), 0):
                refuse_non_mean_step(runtime, self.model, x, y, *weights, each)

    return StepProbe()


def evaluation_probing_callback(runtime: Any, x: Any, y: Any, kwargs: dict[str, Any]) -> Any:
    """The Keras callback (put it first) that probes a ``test_step`` of the program's own when ``evaluate``
    begins (Keras has built the model and its compiled metrics), as fit's probes it: a tracker it feeds a
    ratio of the batch's sums is refused. Before, an ``evaluate`` with no fit before it was not probed
    (the masked accuracy's ratio of each process's part, averaged: 0.3191 for Keras' 0.3185, silently)."""
    keras = require_keras()
    each = kwargs.get("batch_size") or (None if is_batches(x) else 32)

    class TestStepProbe(keras.callbacks.Callback):  # type: ignore[name-defined]
        def on_test_begin(self, logs: Any = None) -> None:
            refuse_non_mean_step(runtime, self.model, x, y, kwargs.get("sample_weight"), None, each, train=False)

    return TestStepProbe()


def refuse_non_mean_step(  # noqa: PLR0913 -- the run, and the data as fit takes it
    runtime: Any,
    model: Any,
    x: Any,
    y: Any,
    sample_weight: Any,
    class_weight: Any,
    batch_size: int | None = None,
    *,
    train: bool = True,
) -> None:
    """In each process: every process probes (the step's effects outside Keras' variables, a counter of
    the program's own, happen alike on every process), and every process raises rank 0's reason.
    ``train=False``: a ``test_step`` of the program's own only (``evaluate``)."""
    world = runtime.world_size
    if world == 1 or not ((needs_probe(model) and train) or own_override(model, "test_step")):
        return
    reason = runtime.broadcast(refusal(model, x, y, sample_weight, class_weight, world, batch_size, train=train), 0)
    if reason:
        raise ValueError(reason)
