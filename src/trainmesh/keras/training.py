"""``fit``, ``evaluate`` and ``predict``: Keras' own methods, run in every process of a trainmesh run.

Each process calls the user's ``model.fit`` (``evaluate``, ``predict``) with the user's arguments
as given, on its share of the arrays (data.py), with the gradients averaged and the metrics summed
across processes underneath (sync.py) and the writing callbacks on rank 0 only (callbacks.py).
On one process that is Keras' ``model.fit`` itself. ``batch_size`` is per process, as a
DataLoader's under the trainmesh Trainer: ``devices=N`` processes at ``batch_size=B`` train
on global batches of ``N * B``.

Under ``strategy="ddp"`` the script runs again once per process (put the calls under
``if __name__ == "__main__":`` or accept that each process runs the whole script); under
``ddp_spawn``/``ddp_fork`` the model travels to the workers (under ``ddp_spawn`` with the program's own
classes: travel.py) and its trained variables come back.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from trainmesh.keras import arguments, masked_losses, zero
from trainmesh.keras.backend import require_keras
from trainmesh.keras.batch_metrics import compiled_among
from trainmesh.keras.batches import (
    epoch_setter,
    is_batches,
    is_py_dataset,
    shuffled_arrays,
    split_batches,
    split_for_prediction,
)
from trainmesh.keras.callbacks import for_rank
from trainmesh.keras.data import (
    concatenate,
    evaluation_plan,
    interleave,
    num_samples,
    plan_training,
    shard,
    share_sizes,
)
from trainmesh.keras.draws import StepRows
from trainmesh.keras.global_draws import predicting
from trainmesh.keras.preemption import KerasPreemption, random_states, set_random_states
from trainmesh.keras.printing import printing_on_rank_0
from trainmesh.keras.probe_callback import evaluation_probing_callback, probing_callback
from trainmesh.keras.spawn_arguments import refuse_unpicklable_arguments
from trainmesh.keras.stateful_layers import refuse_stateful_across_calls
from trainmesh.keras.step_means import evaluation_step_counts, readers_over_processes, watch_evaluation_batches
from trainmesh.keras.sync import SyncState, installed, sync_callback
from trainmesh.keras.travel import Travelling
from trainmesh.keras.worker_errors import launch_raising_as_itself
from trainmesh.runtime import Runtime

# The how-manieth ``fit`` of this process: a script run again after a preemption makes the same calls
# in the same order, so that its n-th fit resumes from the state its n-th fit saved, and from no other.
_FIT_CALLS = itertools.count(1)


def fit(
    model: Any,
    x: Any = None,
    y: Any = None,
    *,
    strategy: str | Any = "auto",
    accelerator: str = "cpu",
    devices: int | str | list[int] = 1,
    num_nodes: int = 1,
    **fit_kwargs: Any,
) -> Any:
    """``model.fit(x, y, **fit_kwargs)`` in each process of the run; Keras' ``History``, in every
    process (the same one: its epoch metrics are over all processes' data).

    Args:
        model: a compiled Keras 3 model (torch backend).
        x: the inputs: arrays/tensors (or lists/dicts of them), a PyDataset or a DataLoader (default ``None``).
        y: the targets, as Keras' ``fit`` takes them (default ``None``).
        strategy: ``"ddp"``, ``"ddp_spawn"``, ``"ddp_fork"`` or ``"zero1"``, as the Trainer takes them
            (default ``"auto"``); fsdp, sharded and hsdp are refused.
        accelerator: ``"cpu"`` (several processes on GPUs are refused for now) (default ``'cpu'``).
        devices: processes per node (default ``1``).
        num_nodes: nodes (under torchrun/SLURM) (default ``1``).
        **fit_kwargs: every other argument of Keras' ``model.fit``, passed as given.

    Examples:
        >>> import trainmesh.keras as tk
        >>> history = tk.fit(model, x, y, batch_size=32, epochs=2, strategy="ddp", devices=2)  # doctest: +SKIP
    """
    runtime = arguments.runtime_for(model, "fit", strategy, accelerator, devices, num_nodes)
    refuse_stateful_across_calls(model, runtime, "fit")
    gather = arguments.check_fit(model, x, y, fit_kwargs, arguments.world_of(runtime))
    if runtime.capabilities.shards_optimizer_state:
        zero.refuse_unsupported(model, fit_kwargs, arguments.world_of(runtime))
    # Keras pickles a model (to spawned workers) without its seed generators' states: they travel beside it.
    # torch's, numpy's and Python's generators too: a spawned worker has not run the program's seeding, and
    # an unseeded Dropout draws its masks from torch's generator (draws.py)
    values = (arguments.variable_values(model), random_states())
    call = next(_FIT_CALLS)
    result = _launch(
        runtime,
        _fit,
        Travelling(model, (x, y, fit_kwargs.get("sample_weight"))),
        x,
        y,
        fit_kwargs,
        values,
        call,
        gather,
    )
    generators = arguments.data_generators(x, fit_kwargs.get("validation_data"))
    return arguments.adopt_fit(model, result, (x, y, fit_kwargs.get("sample_weight")), generators)


def agree(runtime: Runtime, state: SyncState, model: Any, coupled: list[str]) -> None:
    """Rank 0's coupled metrics (each process decided before starting, from its own model) in ``state``:
    compiled ones make ``compute_metrics`` take the global batch, the others their ``update_state``."""
    state.coupled = list(runtime.broadcast(coupled, 0)) if runtime.world_size > 1 else coupled
    state.gather_metrics = compiled_among(model, state.coupled)


def _launch(runtime: Runtime, run: Callable[..., Any], *args: Any) -> Any:
    """``run(runtime, *args)`` in each process of the run. A run of one process happens in this one:
    its process group is left afterwards, as the worker processes of a larger run leave theirs by
    ending, so that a later run in this process (another world size) starts from none."""
    refuse_unpicklable_arguments(runtime, args)  # ddp_spawn: in a Keras user's words, before any process starts
    try:
        return launch_raising_as_itself(runtime, run, *args)  # a spawned worker's exception, as itself
    finally:
        if runtime.world_size == 1:
            runtime.teardown()


def _fit(  # noqa: PLR0913 -- what the launch hands every process
    runtime: Runtime,
    travelling: Travelling,
    x: Any,
    y: Any,
    kwargs: dict[str, Any],
    values: tuple[Any, ...],
    call: int,
    gather: list[str],
) -> Any:
    rank, world, model = runtime.global_rank, runtime.world_size, travelling.model
    arguments.assign_values(model.variables, values[0])
    set_random_states(values[1])
    probe = probing_callback(runtime, x, y, kwargs)  # a step whose loss is not a mean: refused before training
    checks = [probe, masked_losses.checking_callback(world)]  # a loss over the whole batch: a model fit built
    kwargs = dict(kwargs)
    sample_weight = kwargs.pop("sample_weight", None)
    whole = x  # what names the fit for preemption (the same on every process)
    if is_batches(x):  # a PyDataset or a DataLoader: split by batch, weighted by the sizes read (batches.py)
        x, plan = split_batches(x, runtime, train=True), None
    else:
        whole, x, y, sample_weight, plan = _split_arrays(runtime, x, y, sample_weight, kwargs)
    validation = kwargs.get("validation_data")
    state = SyncState(runtime, plan)
    agree(runtime, state, model, gather)
    state.train_blocks = is_py_dataset(whole)
    given = kwargs.get("callbacks")
    state.batch_logs, test_reads = readers_over_processes(runtime, given)  # alike on every process
    if validation is not None:
        batched = is_batches(validation)
        kwargs["validation_data"] = (
            split_batches(validation, runtime, train=False) if batched else shard(validation, rank, world)
        )
        batch, steps = kwargs.get("validation_batch_size") or kwargs.get("batch_size"), kwargs.get("validation_steps")
        state.eval_plan = evaluation_plan(validation, world, batch, steps)
        state.eval_counts = evaluation_step_counts(validation, world, batch, steps)
        state.test_batch_logs = watch_evaluation_batches(test_reads, validation, world, batch, steps, "validation_data")
    if runtime.capabilities.shards_optimizer_state and world > 1:
        state.zero = zero.Zero(runtime, model)
    savers_first = zero.gather_for_savers(state.zero, given)  # zero1: the whole state before a saver writes
    kwargs["callbacks"] = [*checks, *savers_first, *for_rank(given, rank), *epoch_setter(x), sync_callback(state)]
    if rank != 0:
        kwargs["verbose"] = 0
    state.preemption = preemption = KerasPreemption(runtime, model, whole, kwargs, call)
    preemption.find()
    supervision = runtime.supervision  # SIGTERM/SIGUSR1: save and exit 75 (preemption.py)
    with supervision.stop_signals(
        runtime.process, folder=preemption.folder, name=preemption.name, save=preemption.save
    ):
        with installed(model, state), printing_on_rank_0(rank):
            history = model.fit(x, y, sample_weight=sample_weight, **kwargs)
        supervision.finish_fit(
            step=int(model.optimizer.iterations.numpy()), epoch=preemption.epoch, owned=preemption.owned
        )
    preemption.finished()
    preemption.complete_history(history)
    if runtime.process.reports_to_parent:  # a spawned worker: what the parent's model needs, as plain values
        return arguments.fit_result(model, history, arguments.data_generators(whole, validation))
    return history


def _split_arrays(runtime: Runtime, x: Any, y: Any, sample_weight: Any, kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Training arrays after ``validation_split`` (into ``kwargs``): all of them, this process's share (a
    loader of one process's permutation where Keras would shuffle them), and the batch plan."""
    rank, world = runtime.global_rank, runtime.world_size
    (x, y, sample_weight), validation = arguments.split_validation(x, y, sample_weight, kwargs)
    if validation is not None:
        kwargs["validation_data"] = validation
    plan = None
    if world > 1:
        plan = plan_training(num_samples(x), world, kwargs.get("batch_size") or 32, kwargs.get("steps_per_epoch"))
    loader = shuffled_arrays(x, y, sample_weight, kwargs, runtime)  # one process's permutation, split
    if loader is not None:
        kwargs.pop("class_weight", None)  # made sample weights in the loader, as Keras makes them
        kwargs["shuffle"] = False
        return x, loader, None, None, plan
    return (x, *(shard(part, rank, world) for part in (x, y, sample_weight)), plan)


def evaluate(
    model: Any,
    x: Any = None,
    y: Any = None,
    *,
    strategy: str | Any = "auto",
    accelerator: str = "cpu",
    devices: int | str | list[int] = 1,
    num_nodes: int = 1,
    **evaluate_kwargs: Any,
) -> Any:
    """``model.evaluate(x, y, **evaluate_kwargs)`` over all of ``x``/``y``, each process evaluating
    its share; what Keras returns (the metrics of all the data), in every process.

    Args:
        model: a compiled Keras 3 model (torch backend).
        x: the inputs: arrays/tensors (or lists/dicts of them), a PyDataset or a DataLoader (default ``None``).
        y: the targets, as Keras' ``fit`` takes them (default ``None``).
        strategy: ``"ddp"``, ``"ddp_spawn"``, ``"ddp_fork"`` or ``"zero1"``, as the Trainer takes them
            (default ``"auto"``); fsdp, sharded and hsdp are refused.
        accelerator: ``"cpu"`` (several processes on GPUs are refused for now) (default ``'cpu'``).
        devices: processes per node (default ``1``).
        num_nodes: nodes (under torchrun/SLURM) (default ``1``).
        **evaluate_kwargs: every other argument of Keras' ``model.evaluate``, passed as given.

    Examples:
        >>> import trainmesh.keras as tk
        >>> loss, accuracy = tk.evaluate(model, x, y, batch_size=64, strategy="ddp", devices=2)  # doctest: +SKIP
    """
    runtime = arguments.runtime_for(model, "evaluate", strategy, accelerator, devices, num_nodes)
    refuse_stateful_across_calls(model, runtime, "evaluate")
    gather = arguments.check_evaluate(model, x, y, evaluate_kwargs, arguments.world_of(runtime))
    result = _launch(
        runtime,
        _evaluate,
        Travelling(model, (x, y, evaluate_kwargs.get("sample_weight"))),
        x,
        y,
        evaluate_kwargs,
        gather,
    )
    return arguments.adopt_call(result, model, x, y, arguments.data_generators(x))


def _evaluate(
    runtime: Runtime, travelling: Travelling, x: Any, y: Any, kwargs: dict[str, Any], gather: list[str]
) -> Any:
    rank, world, model = runtime.global_rank, runtime.world_size, travelling.model
    kwargs = dict(kwargs)
    state = SyncState(runtime, None)
    agree(runtime, state, model, gather)
    steps = kwargs.get("steps")
    state.eval_counts = evaluation_step_counts(x if is_batches(x) else (x, y), world, kwargs.get("batch_size"), steps)
    _, reads = readers_over_processes(runtime, kwargs.get("callbacks"))  # alike on every process
    state.test_batch_logs = watch_evaluation_batches(reads, x, world, kwargs.get("batch_size"), steps, "x")
    if not is_batches(x):
        state.eval_plan = evaluation_plan(x, world, kwargs.get("batch_size"), kwargs.get("steps"))
    probe = evaluation_probing_callback(runtime, x, y, kwargs)  # a test_step of its own feeding a ratio: refused
    kwargs["callbacks"] = [probe, *for_rank(kwargs.get("callbacks"), rank), sync_callback(state)]
    if "sample_weight" in kwargs:
        kwargs["sample_weight"] = shard(kwargs["sample_weight"], rank, world)
    if rank != 0:
        kwargs["verbose"] = 0
    generators = arguments.data_generators(x)  # this process's copies: the split reads them
    x = split_batches(x, runtime, train=False) if is_batches(x) else shard(x, rank, world)
    with installed(model, state), printing_on_rank_0(rank):
        value = model.evaluate(x, shard(y, rank, world), **kwargs)
    return arguments.call_result(runtime, value, model, generators)


def predict(
    model: Any,
    x: Any,
    *,
    strategy: str | Any = "auto",
    accelerator: str = "cpu",
    devices: int | str | list[int] = 1,
    num_nodes: int = 1,
    **predict_kwargs: Any,
) -> Any:
    """``model.predict(x, **predict_kwargs)``: each process predicts its share (of a PyDataset's or a
    DataLoader's batches: a contiguous run of them, or of the first ``steps * W`` with ``steps=``), and
    every process gets all the outputs, in the order of ``x``: what one process predicts at ``W`` times
    the batch.

    Args:
        model: a compiled Keras 3 model (torch backend).
        x: the inputs: arrays/tensors (or lists/dicts of them), a PyDataset or a DataLoader.
        strategy: ``"ddp"``, ``"ddp_spawn"``, ``"ddp_fork"`` or ``"zero1"``, as the Trainer takes them
            (default ``"auto"``); fsdp, sharded and hsdp are refused.
        accelerator: ``"cpu"`` (several processes on GPUs are refused for now) (default ``'cpu'``).
        devices: processes per node (default ``1``).
        num_nodes: nodes (under torchrun/SLURM) (default ``1``).
        **predict_kwargs: every other argument of Keras' ``model.predict``, passed as given.

    Examples:
        >>> import trainmesh.keras as tk
        >>> outputs = tk.predict(model, x, batch_size=64, strategy="ddp", devices=2)  # doctest: +SKIP
    """
    runtime = arguments.runtime_for(model, "predict", strategy, accelerator, devices, num_nodes)
    refuse_stateful_across_calls(model, runtime, "predict")
    arguments.check_predict(model, x, predict_kwargs, arguments.world_of(runtime))
    result = _launch(runtime, _predict, Travelling(model), x, predict_kwargs)
    return arguments.adopt_call(result, generators=arguments.data_generators(x))


def _predict(runtime: Runtime, travelling: Travelling, x: Any, kwargs: dict[str, Any]) -> Any:
    rank, world, model = runtime.global_rank, runtime.world_size, travelling.model
    kwargs = dict(kwargs)
    kwargs["callbacks"] = for_rank(kwargs.get("callbacks"), rank)
    if rank != 0:
        kwargs["verbose"] = 0
    batched, generators = is_batches(x), arguments.data_generators(x)
    if batched and world > 1:  # each process predicts its run of the first steps * W batches, all of it
        x = split_for_prediction(x, runtime, kwargs.pop("steps", None))
    shares = None if batched or world == 1 else tuple(share_sizes(num_samples(x), world))
    with predicting(model, StepRows(runtime), shares, kwargs.get("batch_size") or 32), printing_on_rank_0(rank):
        outputs = model.predict(x if batched else shard(x, rank, world), **kwargs)
    if world == 1:
        return outputs
    require_keras()
    parts = runtime.all_gather_object(outputs)
    return arguments.call_result(runtime, concatenate(parts) if batched else interleave(parts), None, generators)
