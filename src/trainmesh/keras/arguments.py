"""Checks made before any process starts, and the bridge back from spawned workers.

Everything a run could refuse is refused here, in the calling process, with what, why and what
to do instead: a strategy other than data parallelism, an argument Keras' method does not take,
data that cannot be split over the processes, a split that would give processes different
numbers of steps, a loss whose reduction the gradient averaging would not reproduce.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trainmesh.keras import global_seed, internals
from trainmesh.keras.added_losses import refuse_batch_sums
from trainmesh.keras.backend import is_keras_object, require_keras
from trainmesh.keras.batch_metrics import coupled_metrics, refuse_unchecked_by_hand, refuse_ungatherable
from trainmesh.keras.batches import check_batches, is_batches
from trainmesh.keras.compiled_build import build_compiled, first_batch
from trainmesh.keras.data import (
    check_evaluation_size,
    leaves,
    num_samples,
    plan_training,
    refuse_unshardable,
)
from trainmesh.keras.masked_losses import refuse_batch_wide_losses
from trainmesh.keras.metric_states import refuse_non_additive_metrics
from trainmesh.keras.own_forward import own_override
from trainmesh.keras.routes import refuse_own_drivers
from trainmesh.keras.step_means import evaluation_step_counts
from trainmesh.runtime import Runtime

_REASONS = {
    "fsdp": "FSDP shards a model by swapping the torch module's parameters, which Keras layers never read (they "
    "read their own Variable objects), and Keras' optimizer updates whole variables",
}


def runtime_for(model: Any, what: str, strategy: Any, accelerator: str, devices: Any, num_nodes: int) -> Runtime:
    """The run's Runtime, once the model and the strategy are known to fit Keras' own loop."""
    require_keras()
    internals.check()  # the Keras internals sync.py and zero.py use are all still there
    if not is_keras_object(model) or not hasattr(model, what):
        raise TypeError(f"trainmesh.keras.{what} takes a Keras model (keras.Model), got {type(model).__name__}")
    if what != "predict" and not getattr(model, "compiled", False):
        raise ValueError(
            f"the model is not compiled: call model.compile(optimizer=..., loss=..., metrics=[...]) before {what}"
        )
    runtime = Runtime(accelerator=accelerator, devices=devices, strategy=strategy, num_nodes=num_nodes)
    if hasattr(runtime.strategy, "says_group_banner"):  # Keras prints no "Initializing distributed" lines
        runtime.strategy.says_group_banner = False
    name = runtime.strategy.name
    if not runtime.capabilities.keras_fit:  # single, ddp (any start method), zero1 (zero.py)
        family = "fsdp" if runtime.capabilities.shards_parameters else name
        why = _REASONS.get(family, f"{name!r} splits the model or its steps in ways Keras' own fit loop does not run")
        raise ValueError(
            f"strategy={name!r} cannot run Keras' model.{what}: {why}. Use strategy='ddp' (or 'ddp_spawn', "
            "'ddp_fork'), where every process holds the whole model and gradients are averaged"
        )
    if runtime.device_type != "cpu" and world_of(runtime) > 1:
        raise ValueError(
            f"trainmesh.keras runs several processes on CPU only for now (accelerator={accelerator!r}): Keras' torch "
            "backend places every process's model on the same default device. Use accelerator='cpu', or one device"
        )
    return runtime


def world_of(runtime: Runtime) -> int:
    """How many processes the run will have (known before they start)."""
    return int(runtime.strategy.processes.per_node) * runtime.num_nodes


def bind(method: Any, what: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The arguments as Keras' method would take them, or its TypeError, before any process starts."""
    try:
        bound = inspect.signature(method).bind(*args, **kwargs)
    except TypeError as exc:
        hint = " (seed: call keras.utils.set_random_seed(seed) before building the model)" if "seed" in kwargs else ""
        raise TypeError(f"model.{what}() would refuse these arguments: {exc}{hint}") from None
    return dict(bound.arguments)


def check_fit(model: Any, x: Any, y: Any, kwargs: dict[str, Any], world: int) -> list[str]:
    """Everything ``fit`` would refuse, refused; the metrics that need the global batch (batch_metrics.py)."""
    bind(model.fit, "fit", x, y, **kwargs)
    if world == 1:
        return []
    refuse_unshardable("x", x, world, batches=True)
    refuse_unshardable("y", y, world)
    refuse_unshardable("sample_weight", kwargs.get("sample_weight"), world)
    refuse_unshardable("validation_data", kwargs.get("validation_data"), world, batches=True)
    check_loss_reduction(model)
    refuse_own_drivers(model, world, "fit")
    refuse_non_additive_metrics(model, x, y, world)
    refuse_batch_sums(model, x, world)
    refuse_batch_wide_losses(model, world)
    refuse_unchecked_by_hand(model, x, y, world)
    coupled = coupled_metrics(model, x, y)
    if is_batches(kwargs.get("validation_data")):
        check_batches("validation_data", kwargs["validation_data"], world, train=False)
    if is_batches(x) and kwargs.get("validation_split"):  # Keras' own rule, said before any process starts
        raise ValueError(
            f"validation_split={kwargs['validation_split']} with x a {type(x).__name__}: Keras takes the validation "
            "samples from the end of arrays only ('Argument validation_split is only supported for tensors or NumPy "
            "arrays'), on one process as on several. Pass the held-out samples as validation_data= (a DataLoader or "
            "PyDataset of them)"
        )
    if is_batches(x):  # split by batch (batches.py); Keras itself refuses y with it
        check_batches("x", x, world, train=True)
        validation = kwargs.get("validation_data")
    else:
        train, validation = split_validation(x, y, kwargs.get("sample_weight"), dict(kwargs))
        plan_training(num_samples(train), world, kwargs.get("batch_size") or 32, kwargs.get("steps_per_epoch"))
        if validation is not None and not is_batches(validation):
            check_evaluation_size(num_samples(validation), world, "the validation data")
    if validation is not None:
        batch = kwargs.get("validation_batch_size") or kwargs.get("batch_size")
        counts = evaluation_step_counts(validation, world, batch, kwargs.get("validation_steps"))
        refuse_ungatherable(model, coupled, world, counts, "the validation data")
    else:
        refuse_ungatherable(model, coupled, world, None, "")
    return coupled


def check_evaluate(model: Any, x: Any, y: Any, kwargs: dict[str, Any], world: int) -> list[str]:
    """Everything ``evaluate`` would refuse, refused; the metrics that need the global batch (batch_metrics.py)."""
    bind(model.evaluate, "evaluate", x, y, **kwargs)
    if world == 1:
        return []
    refuse_unshardable("x", x, world, batches=True)
    refuse_own_drivers(model, world, "evaluate")
    refuse_non_additive_metrics(model, x, y, world)
    refuse_batch_sums(model, x, world)
    refuse_batch_wide_losses(model, world)
    refuse_unchecked_by_hand(model, x, y, world)
    coupled = coupled_metrics(model, x, y)
    data = x if is_batches(x) else (x, y)
    if is_batches(x):  # each process evaluates its batches (batches.py); Keras refuses y with them
        check_batches("x", x, world, train=False)
    else:
        for name, value in (("y", y), ("sample_weight", kwargs.get("sample_weight"))):
            refuse_unshardable(name, value, world)
        check_evaluation_size(num_samples((x, y)), world, "x")
    counts = evaluation_step_counts(data, world, kwargs.get("batch_size"), kwargs.get("steps"))
    refuse_ungatherable(model, coupled, world, counts, "x")
    return coupled


def check_predict(model: Any, x: Any, kwargs: dict[str, Any], world: int) -> None:
    bind(model.predict, "predict", x, **kwargs)
    if world > 1:
        refuse_unshardable("x", x, world, batches=True)
        refuse_own_drivers(model, world, "predict")
        if is_batches(x):  # each process predicts a contiguous run of the batches (batches.py)
            check_batches("x", x, world, train=False)
            return
        check_evaluation_size(num_samples(x), world, "x")


def check_loss_reduction(model: Any) -> None:
    """Averaging per-process gradients (weighted by batch share) gives one process's gradient when
    each loss is a mean over the batch's samples: Keras' default reduction. A step of the program's own
    (``train_step`` or ``compute_loss`` overridden) may keep per-sample values (``reduction=None``) and reduce
    them itself: the step probe decides there (step_probe.needs_probe), as for any own step; advising
    'sum_over_batch_size' would break such a program in Keras' own fit (scout-k2: keras-io image captioning)."""
    if own_override(model, "train_step") or own_override(model, "compute_loss"):
        return
    losses = leaves(model.loss) if isinstance(model.loss, (list, tuple, dict)) else [model.loss]
    for loss in losses:
        reduction = getattr(loss, "reduction", "sum_over_batch_size")
        if reduction != "sum_over_batch_size":
            raise ValueError(
                f"the loss {type(loss).__name__}(reduction={reduction!r}): under several processes each one's "
                "gradients are averaged with weights for its share of the batch, which reproduces one process "
                "only for a mean over the samples. Use reduction='sum_over_batch_size' (Keras' default)"
            )


def split_validation(x: Any, y: Any, sample_weight: Any, kwargs: dict[str, Any]) -> tuple[tuple[Any, Any, Any], Any]:
    """``validation_split`` done as Keras does it (its own function: the last part of the arrays),
    before the arrays are split over the processes; pops it (and ``validation_data``) from kwargs."""
    split = kwargs.pop("validation_split", 0.0)
    validation = kwargs.pop("validation_data", None)
    if split and validation is None:
        from keras.src.trainers.data_adapters.array_slicing import train_validation_split

        (x, y, sample_weight), validation = train_validation_split((x, y, sample_weight), validation_split=split)
    return (x, y, sample_weight), validation


@dataclass
class FitResult:
    """What a spawned worker sends back: the History's contents and every trained variable."""

    history: dict[str, list[Any]]
    epoch: list[int]
    params: dict[str, Any]
    variables: list[np.ndarray]
    optimizer_variables: list[np.ndarray] = field(default_factory=list)
    build_config: dict[str, Any] | None = None  # how the worker's fit built the model (Keras' own record)
    # torch's, numpy's and Python's generators where rank 0's fit left them: where one process's would be
    states: dict[str, Any] | None = None
    generators: list[torch.Tensor] = field(default_factory=list)  # data_generators' states after rank 0's fit


@dataclass
class CallResult:
    """What a spawned worker's ``evaluate``/``predict`` sends back: Keras' value, the generators where rank
    0's call left them, and (evaluate) its metrics' states, summed over the processes. Keras' evaluate
    and predict draw a DataLoader seed from torch's generator, and evaluate builds the compiled metrics
    and leaves their states: without them a later ``fit`` (shuffling, dropping out, building the
    metrics from a batch of its data) trained 6.8e-2 apart from one process's, and the model's metrics
    read nothing. A DataLoader's own generators (``data_generators``) move too, as fit's do."""

    value: Any
    states: dict[str, Any]
    metrics: list[np.ndarray] | None = None
    generators: list[torch.Tensor] = field(default_factory=list)  # data_generators' states after rank 0's call


def call_result(runtime: Runtime, value: Any, model: Any = None, generators: Sequence[torch.Generator] = ()) -> Any:
    """In a worker: ``value``, with what its parent cannot see (a spawned or forked worker's)."""
    if not runtime.process.reports_to_parent:
        return value
    metrics = None if model is None else [np.array(v.numpy()) for v in model.metrics_variables]
    return CallResult(value, random_states(), metrics, [generator.get_state() for generator in generators])


def adopt_call(
    result: Any, model: Any = None, x: Any = None, y: Any = None, generators: Sequence[torch.Generator] = ()
) -> Any:
    """In the launching process: a worker's value, its generators and (evaluate) ``model``'s compiled
    metrics built as Keras' own evaluate builds them on ``x``/``y``, with the worker's states. ``generators``
    (the call's data_generators) take rank 0's states: before, an evaluate or predict on a
    DataLoader(shuffle=True, generator=g) under ddp_spawn left g where it was, so the next call re-read its order."""
    if not isinstance(result, CallResult):
        return result
    set_random_states(result.states)
    adopt_generators(generators, result.generators)
    if model is not None and result.metrics is not None:
        build_compiled(model, first_batch(x, y, model=model))  # specs only: nothing drawn, as Keras' evaluate builds
        if len(model.metrics_variables) == len(result.metrics):
            assign_values(model.metrics_variables, result.metrics)
    return result.value


def random_states() -> dict[str, Any]:
    """torch's, numpy's, Python's generators and Keras' global seed generator (global_seed.py)."""
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    return {**states, "keras": global_seed.state()}


def set_random_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "keras" in states:  # a state saved before it was carried: left as it is
        global_seed.set_state(states["keras"])


def variable_values(model: Any) -> list[np.ndarray]:
    return [np.array(v.numpy()) for v in model.variables]


def assign_values(variables: Any, values: list[Any]) -> None:
    for variable, value in zip(variables, values, strict=True):
        variable.assign(value)


def data_generators(*values: Any) -> list[torch.Generator]:
    """The ``torch.Generator``s that DataLoaders among ``values`` draw from (the loader's ``generator=``, one
    its sampler or batch sampler holds), in the order found. A spawned or forked worker's fit moves its copies
    of them as one process's fit moves the program's (its shuffles, each iterator's seed); the launching
    process's take their states back from rank 0's (adopt_fit), so that a later fit reads on from there."""
    from torch.utils.data import DataLoader

    found: dict[int, torch.Generator] = {}
    for value in values:
        owners = (value, value.sampler, value.batch_sampler) if isinstance(value, DataLoader) else ()
        for owner in owners:
            for item in vars(owner).values() if hasattr(owner, "__dict__") else ():
                if isinstance(item, torch.Generator):
                    found.setdefault(id(item), item)
    return list(found.values())


def adopt_generators(generators: Sequence[torch.Generator], states: list[torch.Tensor]) -> None:
    """The launching process's ``generators`` take the states rank 0's copies of them were left in."""
    if len(generators) == len(states):
        for generator, state in zip(generators, states, strict=True):
            generator.set_state(state)


def fit_result(model: Any, history: Any, generators: list[torch.Generator] | None = None) -> FitResult:
    optimizer = model.optimizer
    return FitResult(
        dict(history.history),
        list(history.epoch),
        dict(history.params),
        variable_values(model),
        [np.array(v.numpy()) for v in optimizer.variables] if optimizer is not None and optimizer.built else [],
        plain(model.get_build_config()),
        random_states(),
        [generator.get_state() for generator in generators or []],
    )


def plain(value: Any) -> Any:
    """``value`` with Keras' tracked containers made plain lists and dicts: a model rebuilt from its config
    (a ddp_spawn worker's) keeps its build config's shapes in Keras' ``TrackedList``, whose tracker holds a
    lambda, so the worker's result could not be pickled back once training was over."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return (tuple if isinstance(value, tuple) else list)(plain(item) for item in value)
    return value


def adopt_fit(
    model: Any,
    result: Any,
    data: tuple[Any, Any, Any] = (None, None, None),
    generators: Sequence[torch.Generator] = (),
) -> Any:
    """In the parent of spawned workers: the user's model takes rank 0's trained variables, and its compiled
    metrics and loss are built from ``data``'s first samples' specs (``(x, y, sample_weight)``), as Keras'
    own fit leaves them built: a second spawned fit's workers then build them from specs too, where
    unbuilt each iterated a batch of its data, drawing a DataLoader seed one process does not (a second
    ddp_spawn fit trained 1.6e-2 apart from Keras' own second fit, silently). ``generators`` (the call's
    data_generators) take rank 0's states: before, a DataLoader(shuffle=True, generator=g) fitted again
    after a ddp_spawn fit drew the first fit's orders again, where one process's g had moved on."""
    if not isinstance(result, FitResult):
        return result
    adopt_generators(generators, result.generators)
    keras = require_keras()
    if not model.built and result.build_config:  # built by the workers' fit (a Sequential without an Input)
        model.build_from_config(result.build_config)
    build_compiled(model, first_batch(*data, model=model))  # specs only: nothing drawn
    assign_values(model.variables, result.variables)
    if result.states is not None:  # a later draw (a second fit's shuffle, a Dropout) goes on from there
        set_random_states(result.states)
    optimizer = model.optimizer
    if result.optimizer_variables:
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
        assign_values(optimizer.variables, result.optimizer_variables)
    history = keras.callbacks.History()
    history.set_model(model)
    history.history, history.epoch = result.history, result.epoch
    history.set_params(result.params)
    model.history = history
    return history
