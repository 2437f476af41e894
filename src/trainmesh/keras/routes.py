"""Keras' own methods routed to trainmesh's for the model and optimizer of one run, restored after it.

trainmesh writes no attribute onto the user's model, optimizer or metrics, nor onto their classes.
What it does around each step, at each epoch's end and when zero1 splits or gathers the optimizer
state, it does by replacing methods of Keras' own classes for the length of one call (as
optimizers.py does with ``apply`` and batch_statistics.py with ``BatchNormalization._moments``).
Each replacement looks at the object it is called on: the run's model (or optimizer) gets
trainmesh's behaviour, any other object Keras' own method.

- ``TorchTrainer.make_train_function``/``make_test_function``/``make_predict_function``: Keras'
  torch ``fit``/``evaluate``/``predict`` call them, then the step function they leave in the
  model's ``train_function`` (``test_function``, ``predict_function``: Keras' cache), which calls
  ``self.train_step(data)``. For the run's model the function made calls trainmesh's step, which
  calls the model's own ``train_step``; it is made as Keras makes its own (the batch unwrapped,
  evaluation and prediction under ``torch.no_grad()``). Under ``jit_compile`` the model's step is
  ``torch.compile``'d, as Keras compiles it, and trainmesh's bookkeeping around it (step counts, batch
  sizes, the batch logs' collectives) runs outside the compiled region: traced, it broke the graph at
  every step, and a collective of Python objects failed inside dynamo (a callback reading the batch
  logs: ``InternalTorchDynamoError`` in the first step, /work/progs/k-left).
  The cache is put back as it was when the call ends, so that a later fit of Keras' own runs
  Keras' step function.
- ``Trainer._get_metrics_result_or_logs`` and ``Trainer.compute_metrics`` (sync.py).
- ``finalize_variable_values`` and ``add_variable_from_reference`` of Keras' optimizer classes
  (zero1: zero.py).

A class of the user's that overrides one of the step function makers or
``_get_metrics_result_or_logs`` would go around the replacement: refused before start under
several processes (:func:`refuse_own_drivers`). On one process ``fit`` is Keras' own with it, as
Keras runs it; only a preempted fit resuming mid-epoch needs trainmesh's step function (it passes over
the batches trained before the stop), and is refused when training begins if Keras' fit would call
another (preemption.py).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainmesh.keras.optimizers import own_overrides

# The replacement on the run's object: ours(Keras' method bound to it, *args, **kwargs).
Ours = Callable[..., Any]
# trainmesh's step of a kind: step(data, keras_step), keras_step the model's own (compiled under jit_compile).
Step = Callable[[Any, Callable[[Any], Any]], Any]

# Each method a run of fit/evaluate/predict routes, that a user's class could override around it.
DRIVERS = {
    "fit": ("make_train_function", "make_test_function", "_get_metrics_result_or_logs"),
    "evaluate": ("make_test_function", "_get_metrics_result_or_logs"),
    "predict": ("make_predict_function",),
}


def keras_classes_defining(base: type, name: str) -> list[type]:
    """``base`` and Keras' own subclasses of it (those imported) that define ``name`` themselves."""
    found, pending = [], [base]
    while pending:
        cls = pending.pop(0)
        if cls.__module__.split(".")[0] == "keras" and name in vars(cls) and cls not in found:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


@contextlib.contextmanager
def routed(owners: list[type], name: str, target: Any, ours: Ours) -> Iterator[None]:
    """Within the block, ``name`` of each of Keras' classes ``owners`` called on ``target`` is
    ``ours(Keras' method bound to target, ...)``; on any other object, Keras' own."""
    keras_methods = {cls: vars(cls)[name] for cls in owners}
    for cls, keras_method in keras_methods.items():
        type.__setattr__(cls, name, _dispatching(keras_method, target, ours))
    try:
        yield
    finally:
        for cls, keras_method in keras_methods.items():
            type.__setattr__(cls, name, keras_method)


def _dispatching(keras_method: Callable[..., Any], target: Any, ours: Ours) -> Callable[..., Any]:
    @functools.wraps(keras_method)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self is not target:
            return keras_method(self, *args, **kwargs)
        return ours(functools.partial(keras_method, self), *args, **kwargs)

    return method


def on_trainer(name: str, model: Any, ours: Ours) -> contextlib.AbstractContextManager[None]:
    """Keras' ``Trainer.<name>`` (``compute_metrics``, ``_get_metrics_result_or_logs``) routed for ``model``."""
    from keras.src.trainers.trainer import Trainer

    return routed(keras_classes_defining(Trainer, name), name, model, ours)


def on_optimizer(name: str, optimizer: Any, ours: Ours) -> contextlib.AbstractContextManager[None]:
    """Each Keras optimizer class's ``<name>`` routed for ``optimizer``."""
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    return routed(keras_classes_defining(BaseOptimizer, name), name, optimizer, ours)


@contextlib.contextmanager
def steps_through(model: Any, steps: dict[str, Step]) -> Iterator[dict[str, list[Any]]]:
    """Within the block, the step function Keras' torch trainer makes for ``model`` of each kind in
    ``steps`` ("train", "test", "predict") calls ``steps[kind](data, keras_step)``, ``keras_step`` the model's
    ``<kind>_step`` (``torch.compile``'d under ``jit_compile``, as Keras' own); Keras' cache put back after.
    Yields, for each kind, the function made (once made): a model class overriding the maker may leave
    another in ``model.train_function``, which is what Keras' fit calls."""
    from keras.src.backend.torch.trainer import TorchTrainer

    cached = {kind: getattr(model, f"{kind}_function", None) for kind in steps}
    made: dict[str, list[Any]] = {kind: [] for kind in steps}
    try:
        with contextlib.ExitStack() as stack:
            for kind, step in steps.items():
                name = f"make_{kind}_function"
                stack.enter_context(routed([TorchTrainer], name, model, _maker(model, kind, step, made[kind])))
            yield made
    finally:
        for kind, function in cached.items():
            setattr(model, f"{kind}_function", function)  # as Keras' own make_*_function writes it


def _maker(model: Any, kind: str, step: Step, made: list[Any]) -> Ours:
    """Keras' torch ``make_<kind>_function`` for ``model``, its step function calling ``step``; ``made``:
    the function made in this call (then reused)."""
    attribute = f"{kind}_function"

    def make(keras_make: Callable[..., Any], force: bool = False) -> Any:
        current = getattr(model, attribute, None)
        if made and current is made[0] and not force:
            return current
        if model.steps_per_execution > 1:
            return keras_make(force=True)  # Keras' own error ("must be 1 with the PyTorch backend")

        keras_step = getattr(model, f"{kind}_step")
        if model._should_torch_compile():  # the model's step alone: trainmesh's around it stays eager
            keras_step = torch.compile(keras_step)

        def one_step_on_data(data: Any) -> Any:
            if kind == "train":
                return step(data[0], keras_step)
            with torch.no_grad():
                return step(data[0], keras_step)

        made[:] = [one_step_on_data]
        setattr(model, attribute, one_step_on_data)
        return None

    return make


def refuse_own_drivers(model: Any, world: int, what: str) -> None:
    """A model whose class overrides a Keras method that ``what`` (fit, evaluate, predict) routes: refused
    under several processes (its override would go around trainmesh's step, or the epoch's metric sums)."""
    overrides = own_overrides(model, DRIVERS[what])
    if overrides and world > 1:
        raise ValueError(
            f"the model {type(model).__name__} overrides {' and '.join(overrides)}: under {world} processes "
            f"trainmesh.keras runs {what} through Keras' own torch trainer methods of these names (each step's batch "
            "sizes, the gradient weights and random draws; the metrics summed over the processes at the epoch's end), "
            "so an override of them would leave the processes' steps or metrics per process, silently. Put the "
            "change in train_step/test_step/predict_step (or a callback), or run on one process"
        )
