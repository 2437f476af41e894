"""Per-batch values over all processes: what a step's callbacks read, and means a step updates once.

Two things a process sees of one step differ from what one process sees at the global batch:

- **The batch logs** (``on_train_batch_end``/``on_test_batch_end``): Keras hands the callbacks what the
  step returned, this process's running metrics. When a callback of the program's own reads them (or
  a ``LambdaCallback``, a ``ModelCheckpoint`` saving every ``save_freq`` batches on its monitor, or
  a ``TensorBoard`` writing every ``update_freq`` batches),
  each entry is made its value over all processes, as at an epoch's end (step_logs.py), without
  changing any metric's state: the states are summed for the reading only, then put back.
- **A ``Mean`` updated once per step** with the batch's mean (``tracker.update_state(loss)``:
  its count grows by 1 in a step of several samples). One process counts the global batch's mean
  once; the metric states summed over N processes count each process's mean once: N counts per
  step, each process's mean weighing 1/N of the step, which is right only when the processes'
  batches of that step are of one size. At a step where they are not (the last batch of a pass), this
  process's increment of such a Mean is scaled by N b_r / B (b_r its batch, B the global batch), so
  that the step still adds N counts, and N times the global batch's mean to the total: the summed
  state's result is one process's. Split arrays give every step's sizes in advance. A PyDataset's or
  a DataLoader's sizes are known once read: in training their sum comes with the step's gradient
  collective (sync.py); in evaluation, where the processes may take different numbers of steps, each
  step's increments are kept and weighed at the evaluation's end, once two small sums have gathered
  every process's sizes (:func:`weigh_evaluation`), or at the step itself where a callback reads each
  evaluation batch's logs (every process then takes every step).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainmesh.keras import step_logs
from trainmesh.keras.backend import require_keras
from trainmesh.keras.collectives import all_reduce_sum, assign
from trainmesh.runtime import Runtime

TRAIN_HOOKS = ("on_train_batch_end", "on_batch_end")
TEST_HOOKS = ("on_test_batch_end",)


def reads_batch_logs(callbacks: Any, hooks: tuple[str, ...]) -> bool:
    """Whether a callback given to ``fit``/``evaluate`` reads the logs of each batch at ``hooks``: one
    of the program's own classes or a ``LambdaCallback`` overriding one, or (training) a
    ``ModelCheckpoint`` saving every ``save_freq`` batches (it decides on its monitor's batch value)
    or a ``TensorBoard`` with ``update_freq`` other than ``"epoch"`` (it writes ``batch_<name>`` for
    every entry). Keras' other callbacks read no batch values (the progress bar prints rank 0's own,
    on rank 0)."""
    keras = require_keras()
    base = keras.callbacks.Callback
    for callback in callbacks or []:
        if isinstance(callback, keras.callbacks.ModelCheckpoint):
            if callback.save_freq != "epoch" and hooks == TRAIN_HOOKS:
                return True
            continue
        if isinstance(callback, keras.callbacks.TensorBoard):
            if callback.update_freq != "epoch" and hooks == TRAIN_HOOKS:
                return True
            continue
        own = type(callback).__module__.split(".")[0] != "keras"
        if isinstance(callback, keras.callbacks.LambdaCallback) or own:
            if any(h in vars(callback) or getattr(type(callback), h) is not getattr(base, h) for h in hooks):
                return True
    return False


def evaluation_step_counts(data: Any, world: int, batch_size: int | None, steps: int | None) -> list[int] | None:
    """How many evaluation steps each process takes on its share of ``data`` (None: not known)."""
    from trainmesh.keras.batches import is_batches, is_py_dataset
    from trainmesh.keras.data import is_arrays, num_samples, share_sizes

    if is_batches(data):
        count = data.num_batches if is_py_dataset(data) else len(data)
        counts = [len(range(rank, count, world)) for rank in range(world)]
    elif is_arrays(data):
        counts = [math.ceil(share / (batch_size or 32)) for share in share_sizes(num_samples(data), world)]
    else:
        return None
    return [min(count, steps) for count in counts] if steps is not None else counts


def refuse_uneven_test_batch_logs(counts: list[int] | None, what: str) -> None:
    """A callback reading ``on_test_batch_end`` logs needs every process at every evaluation step."""
    if counts is not None and len(set(counts)) > 1:
        raise ValueError(
            f"a callback reads the logs of each evaluation batch (on_test_batch_end), and the processes take "
            f"{counts} evaluation steps on their shares of {what}: trainmesh.keras makes each batch's logs the "
            "values over all processes, which a step only some processes take cannot have, so that callback "
            "would read one process's values there. Use evaluation data of a number of batches that is a "
            "multiple of the processes (arrays: of samples, a multiple of processes x batch_size), or read the "
            "logs at on_test_end"
        )


def metric_results(model: Any) -> dict[str, Any]:
    """Each metric's result by name, and the compiled metrics' by their own names (Keras' batch logs)."""
    return {**step_logs.own_results(model), **model.get_metrics_result()}


def batch_logs_over_processes(runtime: Runtime, model: Any, logs: Any, batch: int) -> Any:
    """``logs`` of one step with each entry over all processes; every metric state left as it was."""
    if not isinstance(logs, dict):
        return logs
    variables = [v for metric in model.metrics for v in metric.variables]
    own = [v.value.detach().clone() for v in variables]
    before = metric_results(model)
    assign(variables, all_reduce_sum(runtime, own))
    after = metric_results(model)
    assign(variables, own)
    return step_logs.over_processes(runtime, logs, before, after, batch)


def means(model: Any, skip: Any = None) -> list[Any]:
    """The model's ``Mean`` metrics (Keras' ``Mean`` and its subclasses: trackers, metric functions'
    wrappers), those inside the compiled metrics included, except those of ``skip`` (the compiled
    metrics, when rank 0 updates them with the global batch: batch_metrics.py)."""
    keras = require_keras()
    found = []
    for metric in model.metrics:
        if skip is not None and metric is skip:
            continue
        for member in [metric, *(getattr(metric, "metrics", None) or [])]:
            if isinstance(member, keras.metrics.Mean) and member not in found:
                found.append(member)
    return found


def snapshot(model: Any, skip: Any = None) -> list[tuple[Any, Any, Any]]:
    """Each Mean (but those of ``skip``) with its (total, count) before a step."""
    return [(m, m.total.value.detach().clone(), m.count.value.detach().clone()) for m in means(model, skip)]


def learn_once_per_step(before: list[tuple[Any, Any, Any]], batch: int, known: dict[int, bool]) -> None:
    """Record, from a step of more than one sample, which Means it updated once (count + 1) and which by
    its samples: a later step of one sample adds 1 to either kind."""
    if batch > 1:
        for metric, _, count in before:
            added = metric.count.value - count
            if bool((added != 0).any()):
                known[id(metric)] = bool((added == 1).all())


def _updated_once(metric: Any, added: Any, batch: int, known: dict[int, bool]) -> bool:
    # With one sample, a Mean of samples adds 1 too: what an earlier step of this call showed decides.
    return bool((added == 1).all()) and (batch > 1 or known.get(id(metric), False))


def weigh_step_means(
    before: list[tuple[Any, Any, Any]], batch: int, share: float, logs: Any, known: dict[int, bool]
) -> Any:
    """After a step at which the processes' batches differ in size: each Mean the step updated once
    (count + 1 with ``batch`` > 1 samples, or as an earlier step showed: ``known``) has its increment
    scaled by ``share`` (N b_r / B). Entries of ``logs`` that were such a Mean's result become its new
    result (Keras reads them as they are)."""
    changed = {}
    for metric, total, count in before:
        added = metric.count.value - count
        if _updated_once(metric, added, batch, known):
            old = metric.result()
            metric.total.assign(total + (metric.total.value - total) * share)
            metric.count.assign(count + added * share)
            changed[metric.name] = (old, metric.result())
    if not changed or not isinstance(logs, dict):
        return logs
    result = dict(logs)
    for key, value in logs.items():
        if key in changed and step_logs.same(value, changed[key][0]):
            result[key] = changed[key][1]
    return result


def readers_over_processes(runtime: Runtime, callbacks: Any) -> tuple[bool, bool]:
    """Whether a callback of any process reads the training / evaluation batch logs. Under torchrun
    each process passes its own callbacks (``[ModelCheckpoint(save_freq=100)] if rank == 0 else []``):
    decided alone, rank 0 would sum logs over the processes at every step while the others do not, and
    wait forever (or pair its sums with the gradients'); one small sum at the call's start agrees."""
    flags = [reads_batch_logs(callbacks, TRAIN_HOOKS), reads_batch_logs(callbacks, TEST_HOOKS)]
    if runtime.world_size == 1:
        return flags[0], flags[1]
    (summed,) = all_reduce_sum(runtime, [torch.tensor(flags, dtype=torch.float32)])
    return bool(summed[0] > 0), bool(summed[1] > 0)


def watch_evaluation_batches(reads: bool, data: Any, world: int, batch_size: Any, steps: Any, what: str) -> bool:
    """Whether each evaluation batch's logs are to be made over all processes (a callback of any
    process reads them: ``reads``); refused where the processes take different numbers of steps."""
    if world == 1 or not reads:
        return False
    refuse_uneven_test_batch_logs(evaluation_step_counts(data, world, batch_size, steps), what)
    return True


def increments(
    before: list[tuple[Any, Any, Any]], batch: int, known: dict[int, bool]
) -> tuple[int, list[tuple[Any, Any, Any]]]:
    """An evaluation step's ``batch`` and the increments (total, count) of each Mean it updated once
    (as :func:`weigh_step_means` tells): weighed at the evaluation's end (:func:`weigh_evaluation`)."""
    found = []
    for metric, total, count in before:
        added = metric.count.value - count
        if _updated_once(metric, added, batch, known):
            found.append((metric, metric.total.value - total, added))
    return batch, found


def weigh_evaluation(
    runtime: Runtime, model: Any, steps: list[tuple[int, list[tuple[Any, Any, Any]]]], skip: Any = None
) -> None:
    """At the end of an evaluation of batches known only once read (a PyDataset, a DataLoader): every
    process's batch size at each of its steps, gathered in two small sums (the step counts, then the
    sizes), and each recorded increment of a Mean updated once per step scaled by its share N b_r / B of
    that step (B: the step's global batch; a step only some processes take included), as for split
    arrays. Every process joins when the model has a Mean (the same on every process)."""
    found = means(model, skip)
    if not found:
        return
    world, rank = runtime.world_size, runtime.global_rank
    device = found[0].count.value.device
    counts = torch.zeros(world, dtype=torch.float64, device=device)
    counts[rank] = len(steps)
    longest = int(all_reduce_sum(runtime, [counts])[0].max().item())
    sizes = torch.zeros(longest, world, dtype=torch.float64, device=device)
    sizes[: len(steps), rank] = torch.tensor([float(batch) for batch, _ in steps], dtype=torch.float64)
    totals = all_reduce_sum(runtime, [sizes])[0].sum(dim=1).tolist()
    for (batch, recorded), total in zip(steps, totals, strict=False):
        unweighed = 1 - world * batch / total  # 0 where the step's batches are of one size
        for metric, added_total, added_count in recorded:
            if unweighed:
                metric.total.assign(metric.total.value - added_total * unweighed)
                metric.count.assign(metric.count.value - added_count * unweighed)
