"""Metrics a step of the program's own updates by hand, compared by the step probe: refused where their merged states differ.

Under ``N`` processes each process runs the step on its part of every global batch, and each metric's state is
summed over the processes (sync.py). For a tracker a ``train_step`` of the program's own updates by hand with one
value per step (``self.acc_tracker.update_state(acc)``), the summed ``Mean`` reads the mean of the processes' values:
one process's value at the global batch only where that value is a mean over the samples (a loss at Keras' default
reduction). keras-io's image captioning feeds its tracker a masked accuracy, ``sum(acc * mask) / sum(mask)``: a ratio
whose halves' mean is not the batch's where the halves hold other counts of unmasked tokens (2 x 16 against Keras' own
fit at 32: History ``acc`` 2.2e-3 apart, ``val_acc`` 1.1e-3, weights within 6e-8: silently). So is a batch statistic
(``ops.std(y_pred)``).

The step probe (step_probe.py) already runs the step on the first samples of the training data and on each half of
them, restoring every metric's variables between the runs. Here each metric the step updates by hand (all but Keras'
loss tracker and compiled metrics: batch_metrics.by_hand) has its state recorded after each run; the halves' states
are merged as the processes' are (summed, less the state they started from) and the metric's ``result()`` from the
merged state is compared with its ``result()`` after the whole batch. A difference beyond float rounding is refused,
naming the metric. A tracker fed per-sample values, a mean over the samples or a count of them, merges to the
whole batch's to rounding (measured: 0 to 6e-8 relative). Costs a copy of the metrics' variables per run and three
``result()`` calls per metric, once per ``fit``.

A ``test_step`` of the program's own is run alike (:func:`refuse_test_step`), beside Keras' own ``train_step`` too.

Not compared: a ``train_step`` whose halves move torch's generator by draws no tape sees (the halves' values then
differ by those draws: step_probe.py weighs the gradients against that noise, not a tracker), a ``test_step`` that
draws, ``evaluate`` alone (the probe runs when ``fit`` begins), and a ratio whose halves happen to hold equal counts
in the first samples.
"""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.keras import masked_counts, probe_sizes
from trainmesh.keras.backend import require_keras
from trainmesh.keras.batch_metrics import by_hand
from trainmesh.keras.probe_restorer import Restorer, global_seed_state

States = list[list[torch.Tensor]]


class TrackerDiffers(Exception):
    """A metric the step updates by hand whose halves' merged state reads otherwise than the whole batch's."""

    def __init__(self, name: str, expected: torch.Tensor, found: torch.Tensor, step: str = "train_step") -> None:
        super().__init__(name)
        self.name, self.expected, self.found, self.step = name, expected, found, step


def states(metrics: list[Any]) -> States:
    return [[v.value.detach().clone() for v in metric.variables] for metric in metrics]


def _result(metric: Any, state: list[torch.Tensor]) -> torch.Tensor:
    for variable, value in zip(metric.variables, state, strict=True):
        variable.assign(value)
    leaves = require_keras().tree.flatten(metric.result())
    return torch.cat([torch.as_tensor(leaf).detach().double().reshape(-1).cpu() for leaf in leaves])


def refuse_differing(  # noqa: PLR0913 -- the runs' states
    metrics: list[Any], start: States, whole: States, halves: list[States], limit: float, step: str = "train_step"
) -> None:
    """Raise :class:`TrackerDiffers` for the first metric whose halves' merged state reads a ``result()`` other
    than the whole batch's by more than ``limit`` of its size. Each run's update (its state less ``start``) is
    read from the metric's reset state, as the run's processes sum theirs from the state Keras resets at each
    epoch's start: the whole batch's, and the halves' summed. Before, from ``start``: the probe run again at the
    first epoch's end (probe_callback.py) found the epoch's states there, counted them twice in the halves', and
    refused a tracker of the batch's mean loss after an epoch (4.2571 against 4.34561). The metrics' variables
    are left at some run's state: the probe restores them after."""
    first, second = halves
    for metric, s0, w, h1, h2 in zip(metrics, start, whole, first, second, strict=True):
        if len({len(s0), len(w), len(h1), len(h2)}) > 1:
            continue  # variables made at its first update: not compared
        if all(torch.equal(a, b) for a, b in zip(s0, w, strict=True)):
            continue  # the step does not update it
        fresh = _fresh(metric)
        updated = [f + (a - c) for f, a, c in zip(fresh, w, s0, strict=True)]
        merged = [f + (a - c) + (b - c) for f, a, b, c in zip(fresh, h1, h2, s0, strict=True)]
        try:
            expected, found = _result(metric, updated), _result(metric, merged)
        except Exception:  # noqa: BLE001 -- a result() the probe cannot read from a state: not compared
            continue
        if expected.shape != found.shape or not expected.numel():
            continue
        scale = max(float(expected.abs().max()), float(found.abs().max()), 1e-12)
        if float((expected - found).abs().max()) > limit * scale:
            raise TrackerDiffers(metric.name, expected, found, step)


def _fresh(metric: Any) -> list[torch.Tensor]:
    """The metric's variables as its ``reset_state()`` leaves them (the probe restores them after)."""
    metric.reset_state()
    return [v.value.detach().clone() for v in metric.variables]


def refuse_test_step(model: Any, data: Any, limit: float) -> None:
    """A ``test_step`` of the program's own (the model's class overrides it): the metrics it updates by hand, after
    a run on ``data`` and on each half of it (without gradients; every variable and generator restored after each),
    compared as ``train_step``'s. Not compared where the run on the whole batch draws (torch's generator, Keras'
    global seed generator or a variable of the model moved: a seed generator's state), since the halves would draw
    otherwise."""
    metrics = by_hand(model)
    if not metrics:
        return
    keras = require_keras()
    count = len(keras.tree.flatten(data)[0])
    half = count // 2
    parts = [keras.tree.map_structure(lambda leaf, s=s: leaf[s], data) for s in (slice(0, half), slice(half, None))]
    restorer, counts = Restorer(model), masked_counts.CountTape()
    try:
        runs = [_reset(metrics)]  # from fresh states, as Keras' evaluate and each epoch start (not a fit's last)
        for index, part in enumerate([data, *parts]):
            restorer.restore()
            _reset(metrics)
            if index:  # a loss Keras reduces over a mask: the whole batch's count, as the run divides by the global
                counts.replay(half if index == 1 else count - half, count)
            with torch.no_grad(), masked_counts.counted_alike(counts):
                try:
                    type(model).test_step(model, part)
                except Exception as error:  # noqa: BLE001 -- the model cannot take these rows: said (probe_sizes.py)
                    raise probe_sizes.StepFailed(len(keras.tree.flatten(part)[0]), error, "test_step") from error
            if index == 0 and _drew(model, restorer):
                return
            runs.append(states(metrics))
    finally:
        restorer.restore()
    refuse_differing(metrics, runs[0], runs[1], runs[2:], limit, "test_step")


def _reset(metrics: list[Any]) -> States:
    """The metrics' states reset (the probe restores them after): before, a ``tk.evaluate`` after a fit probed
    from the fit's last states, and a tracker of a mean loss was refused (its halves' states summed count
    those states twice)."""
    for metric in metrics:
        metric.reset_state()
    return states(metrics)


def _drew(model: Any, restorer: Restorer) -> bool:
    saved = {id(v): value for v, value in zip(restorer.variables, restorer.values, strict=True)}
    moved = any(not torch.equal(v.value, saved[id(v)]) for v in model.variables if id(v) in saved)
    generator, value = restorer.seed  # Keras' global seed generator: made by a first draw, or moved
    now, after = global_seed_state()
    moved = moved or now is not generator or (now is not None and not torch.equal(after, value))
    return moved or not torch.equal(torch.get_rng_state(), restorer.generators[0])


def reason(differs: TrackerDiffers, world: int, samples: int, fit: bool = True) -> str:
    name, expected, found, step = differs.name, differs.expected, differs.found, differs.step
    show = (lambda t: f"{float(t[0]):.6g}") if expected.numel() == 1 else (lambda t: str(t.tolist()))
    return (
        f"the metric {name!r} that the model's own {step} updates by hand reads {show(expected)} on the first "
        f"{samples} samples of the {'training' if fit else 'evaluated'} data, and {show(found)} from its states on each half of them summed, "
        f"as trainmesh.keras sums each metric's state over the processes: the value the step gives it is not a "
        "mean over the batch's samples (a ratio of the batch's sums, as sum(acc * mask) / sum(mask), or a batch "
        f"statistic). Under {world} processes each process computes that value on its part of every global batch, "
        "and the summed states read the mean of the parts' values, not the value of the global batch: History "
        "and the callbacks would read other numbers than one process's, silently. Feed the metric the values per "
        "sample or position with their weights (update_state(acc_per_token, sample_weight=mask): a Mean of the "
        "unmasked positions, whose sums add up over the processes), or keep the numerator and the denominator "
        "as two states of a keras.metrics.Metric of your own (assign_add each, result() their ratio), or run on "
        "one process"
    )
