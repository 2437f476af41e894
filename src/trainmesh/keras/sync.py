"""Keras' own ``fit``/``evaluate`` in every process, kept in step as Horovod's Keras integration does.

Installed for the length of one call and removed after it, through methods of Keras' own classes
routed for the run's model and optimizer (routes.py; for ``apply``, optimizers.py): nothing is
written onto the user's model, optimizer or metrics.

- every Keras optimizer's ``apply`` during a training step (``model.optimizer`` in Keras' torch
  ``train_step``; a step of the user's may apply others, such as a GAN's two): the gradients
  ``loss.backward()`` left are averaged across processes first (weighted by each process's share
  of the global batch, so a short last batch weighs as in one process: from the split arrays'
  sizes, or, for a PyDataset or DataLoader, from the sizes read, summed in the same collective),
  one collective per bucket. Gradients a step's backward pass accumulated in the model's variables
  are averaged so when the pass ends, for a step of the user's that reads them (backward.py), and
  not again in ``apply``.
- the step functions Keras makes (``make_train_function``/``make_test_function``), around the
  model's own ``train_step``/``test_step``: count the steps and note the batch sizes, for that weighting.
- ``Trainer._get_metrics_result_or_logs``: Keras calls it once at the end of each training epoch
  and of each evaluation, before the logs reach History and the callbacks. Every metric's state
  variables (totals, counts, confusion counts) are summed across processes there, so each
  process reads the metrics of all the data; at a training epoch's end the BatchNormalization
  moving statistics are averaged too, before validation and before any callback saves (within a
  training step each layer normalises with the global batch's moments, batch_statistics.py, so they
  are the same on every process already). When Keras keeps the step's own returned dict instead,
  each entry is made its value over all processes (step_logs.py).
- Keras' ``apply_mask``, within a step: a loss over a mask divides by the global batch's unmasked count
  (masked_counts.py).
- Keras' random functions, within a step: a batch-shaped draw gives each process its rows of what one
  process draws at the global batch (draws.py).

``SyncCallback`` (last in the callback list) broadcasts rank 0's variables when training begins
and makes a stop asked for by any process (``model.stop_training``) a stop in every process.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from trainmesh.keras import hand_updates, routes, step_logs, step_means
from trainmesh.keras.backend import require_keras
from trainmesh.keras.backward import BackwardAverage
from trainmesh.keras.batch_metrics import on_global_batch
from trainmesh.keras.batch_statistics import over_the_global_batch
from trainmesh.keras.collectives import all_reduce_sum, assign, broadcast_from_zero
from trainmesh.keras.data import TrainPlan
from trainmesh.keras.draws import EVALUATING_BATCHES, StepRows, plan_sizes
from trainmesh.keras.global_draws import at_the_global_batch
from trainmesh.keras.masked_counts import over_the_global_count
from trainmesh.keras.optimizers import every_apply_through, own_overrides, refuse_own_apply, refuse_unaveraged_step
from trainmesh.runtime import Runtime

if TYPE_CHECKING:
    from trainmesh.keras.preemption import KerasPreemption
    from trainmesh.keras.zero import Zero


class SyncState:
    """What the wrappers share during one call: the runtime, the batch plan, the phase."""

    def __init__(self, runtime: Runtime, plan: TrainPlan | None) -> None:
        self.runtime, self.plan = runtime, plan
        self.step = 0  # training steps taken in this call
        self.last_batch = 0  # the size of this process's last training or evaluation batch
        self.evaluating = False  # between on_test_begin and on_test_end
        self.zero: Zero | None = None  # strategy="zero1": this process's part of the optimizer state
        self.preemption: KerasPreemption | None = None  # fit: SIGTERM/SIGUSR1 save and exit (preemption.py)
        self.batch_logs = False  # a callback reads each training batch's logs: made over all processes
        self.test_batch_logs = False  # the same, of each evaluation batch
        self.eval_plan: TrainPlan | None = None  # the evaluation's split arrays, batch by batch
        self.eval_step = 0  # evaluation steps taken in this evaluation
        self.eval_steps: list[Any] = []  # an evaluation of batches read: each step's size and Mean increments
        self.global_read: Any = None  # a PyDataset's or DataLoader's global batch of this training step, once summed
        # id(Mean) -> whether a step of more than one sample added exactly 1 to its count (updated once per
        # step): a process whose batch is 1 sample cannot tell that from a Mean of samples by itself
        self.once_per_step: dict[int, bool] = {}
        self.learned_means = False  # a step of more than one sample has run: once_per_step is settled
        self.rows = StepRows(runtime)  # the running step's rows of the global batch, for random draws (draws.py)
        self.train_blocks = False  # training reads a split PyDataset: the processes' batches are blocks of one
        self.gather_metrics = False  # a compiled metric is coupled: compute_metrics gets the global batch
        self.backward: BackwardAverage | None = None  # several processes: gradients averaged as backward ends
        self.coupled: list[str] = []  # the coupled compiled metrics' names (batch_metrics.py)
        self.eval_counts: list[int] | None = None  # each process's evaluation steps (batches dealt in turn)
        self.made: dict[str, list[Any]] = {}  # the step functions trainmesh made, by kind (routes.steps_through)

    @property
    def world(self) -> int:
        return self.runtime.world_size


def average_gradients(state: SyncState, gradients: list[Any], batch: int) -> list[Any]:
    """The gradient one process would compute on the global batch: sum_r (b_r / b) g_r."""
    present = [i for i, g in enumerate(gradients) if g is not None]
    if state.world == 1 or not present:
        return gradients
    if state.plan is None:  # a PyDataset or a DataLoader: batch sizes known only once read
        return _weighted_by_sizes_read(state, gradients, present, batch)
    total = state.plan.global_batch(state.step % state.plan.steps)
    uniform = total == batch * state.world
    tensors = [gradients[i] if uniform else gradients[i] * (batch / total) for i in present]
    summed = all_reduce_sum(state.runtime, tensors)
    averaged = list(gradients)
    for i, value in zip(present, summed, strict=True):
        averaged[i] = value / state.world if uniform else value
    return averaged


def _weighted_by_sizes_read(state: SyncState, gradients: list[Any], present: list[int], batch: int) -> list[Any]:
    """sum_r b_r g_r / sum_r b_r, the batch sizes summed in the same collective as the gradients."""
    first = gradients[present[0]]
    size = torch.tensor([float(batch)], dtype=first.dtype, device=first.device)
    summed = all_reduce_sum(state.runtime, [*(gradients[i] * batch for i in present), size])
    state.global_read = summed[-1]  # read (a device sync) only where a step's Mean needs it: run_step
    averaged = list(gradients)
    for i, value in zip(present, summed[:-1], strict=True):
        averaged[i] = value / summed[-1]
    return averaged


def reduce_metrics(state: SyncState, model: Any) -> None:
    """Every metric's state variables summed over the processes (in place)."""
    variables = [v for metric in model.metrics for v in metric.variables]
    if state.world > 1 and variables:
        assign(variables, all_reduce_sum(state.runtime, [v.value for v in variables]))


def batchnorm_statistics(model: Any) -> list[Any]:
    keras = require_keras()
    found = []
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.BatchNormalization) and layer.built:
            found += [layer.moving_mean, layer.moving_variance]
    return found


def average_batchnorm(state: SyncState, model: Any) -> None:
    """BatchNormalization moving statistics: their mean over the processes, on every process."""
    variables = batchnorm_statistics(model)
    if state.world > 1 and variables:
        summed = all_reduce_sum(state.runtime, [v.value for v in variables])
        assign(variables, [value / state.world for value in summed])


def broadcast_variables(state: SyncState, model: Any) -> None:
    """Rank 0's model and optimizer variables (and resumed epoch) on every process."""
    if state.world == 1:
        return
    variables = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and optimizer.built:
        variables += list(optimizer.variables)
    assign(variables, broadcast_from_zero(state.runtime, [v.value for v in variables]))
    # BackupAndRestore sets _initial_epoch from its file when training begins: rank 0's counts.
    model._initial_epoch = state.runtime.broadcast(model._initial_epoch, 0)


def agree_to_stop(state: SyncState, model: Any) -> None:
    """A stop asked for on any process stops every process (they must take the same steps)."""
    if state.world > 1:
        flag = torch.tensor([1.0 if model.stop_training else 0.0])
        model.stop_training = bool(all_reduce_sum(state.runtime, [flag])[0].item() > 0)


def batch_size_of(data: Any) -> int:
    """The batch dimension of a step's data (its x, or its first array)."""
    x = data[0] if isinstance(data, tuple) else data
    first = next(leaf for leaf in require_keras().tree.flatten(x) if leaf is not None)
    return int(first.shape[0])


@contextlib.contextmanager
def installed(model: Any, state: SyncState) -> Iterator[None]:
    """trainmesh's steps, epoch results and (zero1) gather for ``model``, and every Keras optimizer's
    ``apply``, for the length of the block: through Keras' own classes (routes.py), not the model."""
    batch_sizes: list[int] = []  # the batch of the training step running (none: no step runs)

    def train_step(data: Any, keras_step: Callable[[Any], Any]) -> Any:
        preemption = state.preemption
        if preemption is not None and preemption.skip:  # resumed mid-epoch: a batch trained before the stop
            preemption.skip -= 1
            state.step += 1
            return model.get_metrics_result()
        state.last_batch = batch_size_of(data)
        batch_sizes.append(state.last_batch)
        if state.backward is not None:
            state.backward.step_begins(model)
        try:  # state.plan: None on one process and for a PyDataset or a DataLoader
            logs = run_step(state, model, state.plan, state.step, keras_step, data, state.batch_logs, True)
        finally:
            state.step += 1
            batch_sizes.clear()
        refuse_unaveraged_step(state.world)  # a step that updated nothing through a Keras optimizer
        return logs

    def test_step(data: Any, keras_step: Callable[[Any], Any]) -> Any:
        state.last_batch = batch_size_of(data)
        step, state.eval_step = state.eval_step, state.eval_step + 1
        return run_step(state, model, state.eval_plan, step, keras_step, data, state.test_batch_logs, False)

    moments = over_the_global_batch(state.runtime, lambda: bool(batch_sizes))  # in training steps only
    apply = functools.partial(averaged_apply, state, model, batch_sizes)
    with contextlib.ExitStack() as stack:
        state.made = stack.enter_context(routes.steps_through(model, {"train": train_step, "test": test_step}))
        results = functools.partial(epoch_results, state, model)
        stack.enter_context(routes.on_trainer("_get_metrics_result_or_logs", model, results))
        if state.gather_metrics and state.world > 1:  # a compiled metric is coupled (batch_metrics.py)
            global_batch = on_global_batch(state.runtime, model, functools.partial(takers, state), state.rows)
            stack.enter_context(routes.on_trainer("compute_metrics", model, global_batch))
        if state.zero is not None:  # Keras calls it once training is over, before on_train_end: the whole state first
            stack.enter_context(
                routes.on_optimizer("finalize_variable_values", model.optimizer, _gathering_first(state.zero))
            )
        for block in (every_apply_through(apply), at_the_global_batch(state.rows), moments):
            stack.enter_context(block)
        stack.enter_context(_averaging_backward(state, batch_sizes))
        taking = lambda: takers(state) if state.rows.local is not None else None  # noqa: E731 -- in a step only
        counts = lambda: state.eval_counts  # noqa: E731 -- the evaluation's (fit's validation_data), set before the steps
        stack.enter_context(over_the_global_count(state.runtime, taking, lambda: state.last_batch, counts))
        yield


def averaged_apply(  # noqa: PLR0913 -- where the step stands, and Keras' apply's arguments
    state: SyncState,
    model: Any,
    batch_sizes: list[int],
    optimizer: Any,
    keras_apply: Callable[..., Any],
    gradients: Any,
    variables: Any,
) -> Any:
    """Any optimizer a step applies (model.optimizer, a GAN's d_optimizer/g_optimizer): its gradients
    averaged first (``batch_sizes``: the running training step's batch; empty outside one)."""
    # One whose apply is the user's own (it called Keras' through super()) saw the gradients it was given:
    # right where a backward pass averaged them, else refused before it updates. One process averages
    # nothing, so the class walk is skipped there (this runs every step).
    averaged = _averaged_by_backward(state, optimizer, gradients, variables)
    if state.world > 1 and not averaged:
        refuse_own_apply(optimizer, own_overrides(optimizer, ("apply", "apply_gradients")), state.world)
    if batch_sizes and not averaged:
        gradients = average_gradients(state, list(gradients), batch_sizes[-1])
    zero = state.zero
    if zero is not None and zero.partitioned and optimizer is model.optimizer:  # only its state is split
        chosen = variables if variables is not None else zero.variables  # Keras' default: those it was built on
        return zero.apply(functools.partial(keras_apply, optimizer), gradients, chosen)
    return keras_apply(optimizer, gradients, variables)


@contextlib.contextmanager
def _averaging_backward(state: SyncState, batch_sizes: list[int]) -> Iterator[None]:
    """Several processes: a step of the user's reads the gradients backward leaves, averaged there (backward.py)."""
    if state.world == 1:
        yield
        return
    backward = BackwardAverage(
        functools.partial(average_gradients, state), lambda: batch_sizes[-1] if batch_sizes else None
    )
    state.backward = backward
    try:
        yield
    finally:
        state.backward = None
        backward.remove()


def _averaged_by_backward(state: SyncState, optimizer: Any, gradients: Any, variables: Any) -> bool:
    """Whether the gradients ``apply`` got are those this step's backward passes averaged (backward.py)."""
    if state.backward is None:
        return False
    chosen = variables if variables is not None else getattr(optimizer, "_trainable_variables", None)
    if chosen is None:
        return False
    given = [v for g, v in zip(gradients, chosen, strict=False) if g is not None]
    return bool(given) and state.backward.covers(given)


def takers(state: SyncState) -> list[bool]:
    """Which processes take the running step: every one in training; in an evaluation, those with a
    batch at this step (split arrays: from the plan; batches dealt in turn: from the step counts)."""
    if state.rows.sizes is not None:
        return [size > 0 for size in state.rows.sizes]
    if state.evaluating and state.eval_counts is not None:
        return [count > state.eval_step - 1 for count in state.eval_counts]
    return [True] * state.world


def begin_rows(state: SyncState, plan: TrainPlan | None, step: int, *, training: bool) -> None:
    """Where this process's batch of the step beginning sits in the global batch (draws.py): split arrays
    give every process's size; a PyDataset's or a DataLoader's training sizes are summed at the step's
    first draw (every process takes every training step); their evaluation's refuse batch-shaped draws."""
    if plan is not None:
        sizes = plan_sizes(plan.shares, plan.batch_size, step % plan.steps)
        state.rows.begin(state.last_batch, sizes, blocks=False)
    elif training:
        state.rows.begin(state.last_batch, None, blocks=state.train_blocks)
    else:
        state.rows.begin(state.last_batch, None, blocks=True, refusal=EVALUATING_BATCHES)


def run_step(  # noqa: PLR0913 -- the step, and where it stands
    state: SyncState,
    model: Any,
    plan: TrainPlan | None,
    step: int,
    keras_step: Callable[[Any], Any],
    data: Any,
    sync_logs: bool,
    training: bool,
) -> Any:
    """``keras_step(data)``, step ``step`` of the pass ``plan`` describes (step_means.py): where the
    processes' batches differ in size, each Mean the step updated once takes this process's share of
    its increment; where a callback reads the batch logs, they are made over all processes.

    Split arrays (``plan``) give every step's batch sizes in advance. A PyDataset's or a DataLoader's
    training batches are known only once read: their sum comes with the step's gradient collective
    (``state.global_read``), so no step pays another collective for it."""
    if plan is not None:
        step %= plan.steps  # the step of the pass (training counts the steps of every epoch)
    uneven = plan is not None and plan.uneven(step)
    read = plan is None and state.world > 1  # sizes read: uneven or not, known after the step (or the evaluation)
    learn = state.world > 1 and not state.learned_means  # the first full step tells which Means count steps
    skip = model._compile_metrics if state.gather_metrics else None  # rank 0 updates them for every process
    before = step_means.snapshot(model, skip) if uneven or read or learn else []
    state.global_read = None
    begin_rows(state, plan, step, training=training)
    try:
        logs = keras_step(data)
    finally:
        state.rows.end()
    step_means.learn_once_per_step(before, state.last_batch, state.once_per_step)
    state.learned_means = state.learned_means or state.last_batch > 1  # no snapshot per step after it
    total = plan.global_batch(step) if plan is not None else state.global_read if training else None
    if before and plan is None and not training:
        if sync_logs:  # every process takes every step (refused otherwise): the sizes summed now, for the logs
            total = all_reduce_sum(state.runtime, [torch.tensor([float(state.last_batch)])])[0]
        else:  # the other processes' sizes: summed at the evaluation's end (they may take fewer steps)
            state.eval_steps.append(step_means.increments(before, state.last_batch, state.once_per_step))
    if before and total is not None:
        share = state.world * state.last_batch / float(total)  # 1 where the batches are of one size
        if share != 1:
            logs = step_means.weigh_step_means(before, state.last_batch, share, logs, state.once_per_step)
    if sync_logs and state.world > 1:
        logs = step_means.batch_logs_over_processes(state.runtime, model, logs, state.last_batch)
    return logs


def epoch_results(state: SyncState, model: Any, keras_results: Callable[[Any], Any], logs: Any) -> Any:
    """What Keras' ``_get_metrics_result_or_logs`` returns, over all processes (the same on each)."""
    before = step_logs.own_results(model) if state.world > 1 else {}
    if state.evaluating and state.eval_plan is None and state.world > 1:
        skip = model._compile_metrics if state.gather_metrics else None
        step_means.weigh_evaluation(state.runtime, model, state.eval_steps, skip)
    state.eval_steps = []
    reduce_metrics(state, model)
    if not state.evaluating:
        average_batchnorm(state, model)  # a training epoch ended: before validation and the callbacks
        hand_updates.refuse_parted(state.runtime, model, batchnorm_statistics(model))
    result = keras_results(logs)
    if result is logs and isinstance(logs, dict) and state.world > 1:  # Keras kept the step's own dict
        result = step_logs.over_processes(state.runtime, logs, before, step_logs.own_results(model), state.last_batch)
    return result


def _gathering_first(zero: Zero) -> Callable[..., Any]:
    def finalize_variable_values(keras_finalize: Callable[..., Any], var_list: Any) -> Any:
        zero.gather()
        return keras_finalize(var_list)

    return finalize_variable_values


def epoch_of(state: SyncState) -> int:
    return state.preemption.epoch if state.preemption is not None else 0


def sync_callback(state: SyncState) -> Any:
    """The Keras callback that keeps the processes in step (put it last)."""
    keras = require_keras()

    class SyncCallback(keras.callbacks.Callback):  # type: ignore[name-defined]
        def on_train_begin(self, logs: Any = None) -> None:
            if state.preemption is not None:  # fit made its step function: a resume's skip must be in it
                state.preemption.refuse_a_step_around_the_skip(self.model.train_function in state.made.get("train", []))
                state.preemption.restore_variables()
            broadcast_variables(state, self.model)
            if state.zero is not None:
                state.zero.partition()

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            if state.preemption is not None:
                state.preemption.epoch_begins(epoch)

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if state.zero is not None and not state.zero.partitioned:  # gathered for a saver (zero.py)
                state.zero.partition()
            if state.preemption is not None:
                state.preemption.batch_begins()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            agree_to_stop(state, self.model)
            if state.world > 1 and state.step <= hand_updates.STEPS_CHECKED:  # a variable moved apart by hand
                hand_updates.refuse_parted(state.runtime, self.model, batchnorm_statistics(self.model), state.step)
            if state.preemption is not None:
                state.preemption.batches = batch + 1
                supervision = state.runtime.supervision
                if supervision.stop_agreed():  # SIGTERM/SIGUSR1 on some process: every one stops here
                    if state.zero is not None:
                        state.zero.gather()  # the whole optimizer state on rank 0, to save
                    step = int(self.model.optimizer.iterations.numpy())
                    supervision.save_and_exit(step=step, epoch=epoch_of(state))

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            agree_to_stop(state, self.model)
            if state.preemption is not None:
                state.preemption.epoch_ends(epoch, logs)

        def on_train_end(self, logs: Any = None) -> None:
            if state.zero is not None:
                state.zero.gather()

        def on_test_begin(self, logs: Any = None) -> None:
            state.evaluating = True
            state.eval_step = 0
            state.eval_steps = []

        def on_test_end(self, logs: Any = None) -> None:
            state.evaluating = False

    return SyncCallback()
