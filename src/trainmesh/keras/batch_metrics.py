"""Compiled metrics whose update on a batch is not the sum of its samples' updates: on the global batch.

Under several processes each metric's state is summed over the processes (sync.py), which is one
process's state at the global batch when a batch's update is the sum of its samples' updates (the
totals and counts of Keras' own metrics). Some are not: keras-io's ``CategoricalTruePositives``
compares ``y_true`` of shape ``(b,)`` with ``argmax(y_pred)`` reshaped to ``(b, 1)``, which broadcasts
to ``(b, b)``, so a batch adds a count of every pair of its samples (quadratic in the batch); a metric
function reducing a batch to one number (wrapped by Keras in a ``Mean``) adds one value per batch.
Summed over the processes, each adds what its part of the batch gives: silently not one process's
number (the guide's program: History 289 apart at 2 processes).

Before start, a built model is called (inference) on the first samples of the training data (arrays,
a PyDataset's or a map-style DataLoader's first samples) and each compiled metric of a class or a
function of the program's own is updated, on a copy, with those samples together and with each
alone. One whose state together is not the sum of its states alone is "coupled". Then, within every
training and evaluation step, ``model.compute_metrics`` is given the step's global batch: every
process's ``y``, ``y_pred`` and ``sample_weight`` gathered (one all_gather per array) and put in the
order one process's batch has them; rank 0 updates the compiled metrics with it and the other
processes leave theirs untouched, so the summed states are one process's (at a step only rank 0
takes, the last of an evaluation, its batch is the global one). Costs those gathers at every step, only
when a coupled metric is compiled. ``compute_metrics`` is Keras' own method, routed for the run's model
(routes.py), so a ``train_step``/``test_step`` of the model's own that calls ``self.compute_metrics``
gets the same.

Refused before start under several processes: a model whose class overrides ``compute_metrics`` (it may
use ``x``, which is not gathered); an evaluation whose steps are taken by more than one but not every
process (3 processes or more, uneven shares); and a coupled metric of the program's own class that a
``train_step``/``test_step`` of the model's own updates by hand (keras-io's pattern without
``compute_metrics``: ``self.pairs.update_state(y, y_pred)``). There the step calls the metric's own
``update_state`` directly, with nothing of Keras' in between (Keras 3's ``Metric`` does not wrap
``update_state``; its ``__call__`` calls it, a direct call does not go through it), so no Keras method
could be routed to give it the global batch, and rebinding the user's metric is not done. Not probed:
a model not built, a model with several outputs, data the probe cannot index; where such a metric (of the
program's own class, updated by hand with other than one value) is not probed, it is refused under several
processes (:func:`refuse_unchecked_by_hand`: keras-io's DDIM's KID, 6.0 apart before).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from trainmesh.keras.backend import require_keras
from trainmesh.keras.probe_data import probe_batch


def _compiled(model: Any) -> list[Any]:
    """The compiled metrics as given to ``compile`` (or as Keras built them): objects and functions."""
    keras = require_keras()
    compiled = getattr(model, "_compile_metrics", None)
    if compiled is None:
        return []
    if compiled.built:
        return list(compiled.metrics)
    given = [getattr(compiled, "_user_metrics", None), getattr(compiled, "_user_weighted_metrics", None)]
    return [m for m in keras.tree.flatten(given) if m is not None]


def _own_copy(metric: Any) -> Any:
    """A fresh copy of a metric of the program's own (its class, or its function in Keras' wrapper);
    None for Keras' own metrics (their updates are sums over the samples)."""
    keras = require_keras()

    def own(thing: Any) -> bool:
        return (getattr(thing, "__module__", None) or "keras").split(".")[0] != "keras"

    if isinstance(metric, keras.metrics.MeanMetricWrapper) and type(metric) is keras.metrics.MeanMetricWrapper:
        fn = getattr(metric, "_fn", None)
        return keras.metrics.MeanMetricWrapper(fn, **getattr(metric, "_fn_kwargs", {})) if own(fn) else None
    if isinstance(metric, keras.metrics.Metric):
        return type(metric).from_config(metric.get_config()) if own(type(metric)) else None
    if callable(metric) and not isinstance(metric, str) and own(metric):
        return keras.metrics.MeanMetricWrapper(metric)
    return None


def _state(metric: Any, y_true: Any, y_pred: Any) -> list[np.ndarray]:
    metric.reset_state()
    metric.update_state(y_true, y_pred)
    return [np.asarray(v.numpy(), dtype=np.float64) for v in metric.variables]


def _name(metric: Any) -> str:
    return str(getattr(metric, "name", None) or getattr(metric, "__name__", None) or type(metric).__name__)


@contextlib.contextmanager
def left_as_it_was(model: Any) -> Iterator[None]:
    """Every variable of ``model`` (seed generators' states included) and torch's generator, restored."""
    variables = list(model.variables)
    saved = [variable.value.detach().clone() for variable in variables]
    generator = torch.get_rng_state()
    try:
        yield
    finally:
        for variable, value in zip(variables, saved, strict=True):
            variable.assign(value)
        torch.set_rng_state(generator)


def by_hand(model: Any) -> list[Any]:
    """The model's metrics that a ``train_step``/``test_step`` of its own updates itself (keras-io's
    ``self.loss_tracker``, a metric attribute): all but Keras' loss tracker and compiled metrics."""
    keras_own = (getattr(model, "_loss_tracker", None), getattr(model, "_compile_metrics", None))
    return [metric for metric in getattr(model, "metrics", None) or [] if not any(metric is k for k in keras_own)]


def coupled_metrics(model: Any, x: Any, y: Any) -> list[str]:
    """The compiled metrics, and the metrics a step of the model's own updates by hand (of the program's
    own classes), whose update on the first samples of the data together is not the sum of their updates
    on each sample alone, by name; [] when none (or not probed)."""
    keras = require_keras()
    copies = [(metric, _own_copy(metric)) for metric in [*_compiled(model), *by_hand(model)]]
    copies = [(metric, copy) for metric, copy in copies if copy is not None]
    batch = probe_batch(x, y) if copies and getattr(model, "built", False) else None
    if batch is None:
        return []
    inputs, targets = batch
    try:
        with left_as_it_was(model):
            predicted = model(inputs, training=False)
    except Exception:  # noqa: BLE001 -- a model the probe cannot call: not probed
        return []
    if not hasattr(predicted, "shape") or isinstance(targets, (dict, list, tuple)):  # several outputs: not probed
        return []
    y_pred = keras.ops.convert_to_numpy(predicted)
    found = []
    for metric, copy in copies:
        try:
            together = _state(copy, targets, y_pred)
            alone = [_state(copy, targets[i : i + 1], y_pred[i : i + 1]) for i in range(len(targets))]
        except Exception:  # noqa: BLE001 -- a metric the probe cannot call with (y_true, y_pred): not probed
            continue
        summed = [sum(parts) for parts in zip(*alone, strict=True)]
        if not all(np.allclose(t, s, rtol=1e-5, atol=1e-6) for t, s in zip(together, summed, strict=True)):
            found.append(_name(metric))
    return found


def unchecked_by_hand(model: Any, x: Any, y: Any) -> dict[str, str]:
    """The metrics of the program's own classes that a step of the model's own updates by hand and that
    :func:`coupled_metrics` could not update with the targets and the model's predictions of the first
    samples (no targets, a model without a call of its own, several outputs, an update taking other
    arguments: keras-io's KID, updated with real and generated images in a test_step), by name, with why."""
    from trainmesh.keras.metric_states import takes_values

    keras = require_keras()
    # A tracker updated with one value per step (a loss) is metric_states.py's (and step_means.py's) to check
    own = [metric for metric in by_hand(model) if _own_copy(metric) is not None and not takes_values(metric)]
    if not own:
        return {}
    built = getattr(model, "built", False)
    batch = probe_batch(x, y) if built else None
    why = "" if batch is not None else "no targets to update it with" if built else "the model is not built before fit"
    predicted = None
    if batch is not None:
        try:
            with left_as_it_was(model):
                predicted = model(batch[0], training=False)
        except Exception:  # noqa: BLE001 -- a model the probe cannot call
            why = "the model cannot be called on the inputs"
    if (
        batch is not None
        and predicted is not None
        and (not hasattr(predicted, "shape") or isinstance(batch[1], (dict, list, tuple)))
    ):
        why = "the model has several outputs"
    unchecked = {}
    for metric in own:
        reason = why
        if not reason and batch is not None:  # (no reason: there is a batch)
            try:
                _state(_own_copy(metric), batch[1], keras.ops.convert_to_numpy(predicted))
            except Exception as err:  # noqa: BLE001 -- an update taking other arguments than (y_true, y_pred)
                reason = f"its update_state(y_true, y_pred) fails ({type(err).__name__})"
        if reason:
            unchecked[_name(metric)] = reason
    return unchecked


def refuse_unchecked_by_hand(model: Any, x: Any, y: Any, world: int) -> None:
    """A metric of the program's own class updated by hand in a step, which the probe cannot check: refused."""
    unchecked = unchecked_by_hand(model, x, y) if world > 1 else {}
    if unchecked:
        name, why = next(iter(unchecked.items()))
        raise ValueError(
            f"the metric {name!r}, of a class of your own, is updated by hand in {type(model).__name__}'s own "
            f"train_step/test_step, and trainmesh.keras cannot check that its update on a batch is the sum of its "
            f"updates on each sample ({why}). Under {world} processes each process updates it with its part of each "
            "batch and the states are summed: a metric over pairs of a batch's samples (keras-io's KID), or one value "
            "per batch, would give another number than one process's, silently. Make its update a sum over the "
            "samples (assign_add of per-sample values), compute it after fit on one process, or run on one process"
        )


def compiled_among(model: Any, coupled: list[str]) -> bool:
    """Whether a metric of ``coupled`` (names) is compiled, not one a step of the model's updates by hand."""
    hand = {metric.name for metric in by_hand(model)}
    return any(name not in hand for name in coupled)


def gatherable_evaluation(counts: list[int] | None) -> bool:
    """Whether every evaluation step is taken by every process or by rank 0 alone (the processes'
    step counts fall with the rank: split arrays and batches dealt in turn)."""
    return counts is None or len(set(counts[1:])) <= 1


def refuse_ungatherable(model: Any, coupled: list[str], world: int, counts: list[int] | None, what: str) -> None:
    """A coupled metric where the global batch cannot be given to ``compute_metrics``: refused."""
    if world == 1 or not coupled:
        return
    from keras.src.trainers.trainer import Trainer

    why = (
        f"the metric {', '.join(map(repr, coupled))} updates its state on a batch with other than the sum of its "
        f"updates on each sample (a count over pairs of samples, a value per batch), so under {world} processes "
        "each process's part of a batch would add another number than one process's batch does. trainmesh.keras "
        "gives such metrics the global batch at every step, "
    )
    hand = [name for name in coupled if name in {metric.name for metric in by_hand(model)}]
    if hand:
        raise ValueError(
            f"the metric {', '.join(map(repr, hand))} updates its state on a batch with other than the sum of its "
            f"updates on each sample (a count over pairs of samples, a value per batch), so under {world} processes "
            "each process's part of a batch would add another number than one process's batch does. "
            f"{type(model).__name__}'s own train_step/test_step updates it by hand (metric.update_state(...)), which "
            "reaches the metric's own method with nothing of Keras' in between, so trainmesh.keras cannot give it the "
            "global batch. Compile it (model.compile(metrics=[...])) and call self.compute_metrics(x, y, y_pred) in "
            "the step (trainmesh gives Keras' compute_metrics the global batch), make its update a sum over the "
            "samples (assign_add of per-sample values), or run on one process"
        )
    compiled = compiled_among(model, coupled)
    if compiled and type(model).compute_metrics is not Trainer.compute_metrics:
        raise ValueError(
            why + f"through Keras' compute_metrics, which {type(model).__name__} overrides (it may read x, which is "
            "not gathered). Compute it per sample (sum per-sample values with assign_add), or run on one process"
        )
    if not gatherable_evaluation(counts):
        raise ValueError(
            why + f"which needs every process, or rank 0 alone, at each evaluation step; the processes take {counts} "
            f"steps on their shares of {what}. Use evaluation data of a number of samples that is a multiple of "
            "processes x batch_size, or run on one process"
        )


def _rows(sizes: list[int], blocks: bool) -> list[torch.Tensor]:
    """Each process's rows of the global batch (consecutive blocks, or interleaved r, r + N, ...)."""
    world, starts = len(sizes), np.cumsum([0, *sizes])
    if blocks:
        return [torch.arange(int(starts[r]), int(starts[r]) + sizes[r]) for r in range(world)]
    return [torch.arange(r, r + world * sizes[r], world) for r in range(world)]


def gather_global_batch(runtime: Any, tree: Any, sizes: list[int], blocks: bool) -> Any:
    """Each array of ``tree`` (this process's batch first) as one process's global batch holds it."""
    keras = require_keras()
    rows, longest, total = _rows(sizes, blocks), max(sizes), sum(sizes)

    def gather(leaf: Any) -> Any:
        if leaf is None:
            return None
        tensor = keras.ops.convert_to_tensor(leaf)
        dtype, tensor = tensor.dtype, tensor.detach()
        if tensor.dtype == torch.bool:  # gloo gathers no bool
            tensor = tensor.to(torch.uint8)
        padded = tensor.new_zeros((longest, *tensor.shape[1:]))
        padded[: tensor.shape[0]] = tensor
        parts = runtime.all_gather(padded)
        whole = tensor.new_zeros((total, *tensor.shape[1:]))
        for rank, where in enumerate(rows):
            whole[where.to(whole.device)] = parts[rank][: sizes[rank]]
        return whole.to(dtype)

    return keras.tree.map_structure(gather, tree)


def on_global_batch(runtime: Any, model: Any, takers_now: Callable[[], list[bool]], rows: Any) -> Callable[..., Any]:
    """Keras' ``compute_metrics`` for ``model`` (routes.py) given the step's global batch (``takers_now()``:
    which processes take the running step; ``rows``: the step's batch sizes, draws.StepRows): rank 0
    updates, the others read."""

    def compute_metrics(
        keras_compute: Callable[..., Any], x: Any, y: Any, y_pred: Any, sample_weight: Any = None
    ) -> Any:
        if rows.local is None:  # outside a step: Keras building the metrics (symbolic tensors, no update)
            return keras_compute(x, y, y_pred, sample_weight=sample_weight)
        takers = takers_now()
        if all(takers):
            y, y_pred, sample_weight = gather_global_batch(
                runtime, (y, y_pred, sample_weight), rows.every_size(), rows.blocks
            )
        elif sum(takers) != 1 or not takers[0]:  # refused before start (refuse_ungatherable)
            raise RuntimeError(f"an evaluation step taken by the processes {takers}: no global batch to gather")
        if runtime.global_rank == 0:
            return keras_compute(x, y, y_pred, sample_weight=sample_weight)
        return model.get_metrics_result()

    return compute_metrics
