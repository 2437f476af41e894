"""Metric classes of the program's own whose state is not a sum over the batches: refused before start.

Under several processes each metric's state variables are summed over the processes (sync.py), which
is one process's state at the global batch only when a state adds up: updating with batch A then B
leaves state(A) + state(B), as the totals and counts of Keras' own metrics do. A class of the user's
may keep another state (a running maximum, a mean assigned anew at each update): summed, it is
silently wrong (a maximum of 3.7 reads 7.1 at 2 processes). Before start, each compiled metric of a
class that is not Keras' own is probed on a copy (``from_config``) with two one-sample batches of the
training targets (each output's in turn, for a model with several) with constant predictions of 0.25 and 0.75 (four batches, so that some score
non-zero whatever the targets); one whose state after any ordered pair of them (a batch with itself
too) is not the sum of its states after each alone is refused. A metric a ``train_step`` of the model's
own updates by hand with one value (``self.peak.update_state(loss)``) is probed alike with the values
0.25, 0.75, 1.5 and 3.0. A class whose ``update_state`` the probe cannot call (other arguments, a copy
it cannot make) is not probed.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from trainmesh.keras.backend import require_keras
from trainmesh.keras.probe_data import probe_batch


def own_metric_classes(model: Any) -> list[Any]:
    """The compiled metrics (and the model's own metrics) of classes defined outside Keras."""
    keras = require_keras()
    found = []
    for metric in getattr(model, "metrics", None) or []:
        # compiled metrics are built at the first update: before it, those given to compile()
        given = [getattr(metric, "_user_metrics", None), getattr(metric, "_user_weighted_metrics", None)]
        members = getattr(metric, "metrics", None) or keras.tree.flatten(given)
        for member in [metric, *members]:
            if not isinstance(member, keras.metrics.Metric):
                continue
            if type(member).__module__.split(".")[0] != "keras" and member not in found:
                found.append(member)
    return found


def _state(metric: Any, updates: list[tuple[Any, ...]]) -> list[np.ndarray]:
    metric.reset_state()
    for arguments in updates:
        metric.update_state(*arguments)
    return [np.asarray(v.numpy(), dtype=np.float64) for v in metric.variables]


def takes_values(metric: Any) -> bool:
    """Whether ``update_state`` takes one value (a tracker a step of the model's own updates by hand,
    ``tracker.update_state(loss)``), not ``(y_true, y_pred)``."""
    try:
        parameters = inspect.signature(metric.update_state).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in positional and p.default is inspect.Parameter.empty for p in parameters) == 1


# Values a tracker is updated with (a loss, a norm): some small, some large, so that a running maximum,
# a last value or a moving average shows whatever order they come in.
VALUES = [(np.float32(value),) for value in (0.25, 0.75, 1.5, 3.0)]


def _targets(x: Any, y: Any) -> list[np.ndarray]:
    """Two samples of each of the training targets: one array, each output's of a model with several
    (a list or dict of arrays: a metric on one output is probed with each output's targets), or those of
    a PyDataset's or DataLoader's first batch."""
    keras = require_keras()
    found = probe_batch(x, y)
    if found is None:
        return []
    return [np.asarray(leaf[:2], dtype=np.float32) for leaf in keras.tree.flatten(found[1])]


def refuse_non_additive_metrics(model: Any, x: Any, y: Any, world: int) -> None:
    """Under several processes: a metric class of the user's whose state does not add up, refused."""
    if world == 1:
        return
    metrics = own_metric_classes(model)
    # Each target with a low and a high prediction: whatever the targets, some batches score non-zero
    # (a state of 0 first hides a decay: 0.9 * 0 + x adds up once, not when a non-zero state comes first).
    # Before k-progs5 only one array of targets was probed: a running maximum on one output of a model with
    # two read 3.1 apart from Keras' own fit (its History) at 2 processes, silently.
    batches = [
        [(t, np.full_like(t, p)) for p in (0.25, 0.75) for t in (targets[:1], targets[1:])]
        for targets in (_targets(x, y) if metrics else [])
    ]
    for metric in metrics:
        found = None
        for probes in [VALUES] if takes_values(metric) else batches:
            found = found or _not_adding_up(metric, probes)
        if found is not None:
            both, summed = found
            raise ValueError(
                f"the metric {metric.name!r} ({type(metric).__name__}) keeps a state that does not add up over "
                f"batches: updated twice, one update after the other, its state is {_show(both)}, where the "
                f"two updates alone sum to {_show(summed)}. Under {world} processes trainmesh.keras sums each "
                "metric's state over the processes (each process sees its part of every global batch), which is "
                "one process's metric only for states that add up (totals and counts, as Keras' own metrics keep). "
                "Keep sums with assign_add and compute the result from them in result(), or compute this metric "
                "after training with model.evaluate in one process"
            )


def _not_adding_up(metric: Any, batches: list[tuple[Any, ...]]) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """The first ordered pair of ``batches`` (each with itself too) whose state updated one after the
    other is not the sum of the two alone, as (both, summed); None when all add up or not probed."""
    try:
        probe = type(metric).from_config(metric.get_config())
        alone = [_state(probe, [batch]) for batch in batches]
        for i, first in enumerate(batches):
            for j, second in enumerate(batches):
                both = _state(probe, [first, second])
                summed = [s + t for s, t in zip(alone[i], alone[j], strict=True)]
                close = (
                    np.allclose(s, t, rtol=1e-5, atol=1e-6, equal_nan=True) for s, t in zip(both, summed, strict=True)
                )
                if not all(close):
                    return both, summed
    except Exception:  # noqa: BLE001 -- a signature the probe cannot call: not probed
        return None
    return None


def _show(state: list[np.ndarray]) -> str:
    return "[" + ", ".join(np.array2string(s, precision=4) for s in state) + "]"
