"""The private parts of Keras that trainmesh.keras relies on, checked before any process starts.

sync.py routes Keras' ``Trainer._get_metrics_result_or_logs`` for the run's model (routes.py), which
Keras' torch ``fit`` and ``evaluate`` call once per epoch and per evaluation, to sum the metrics
over the processes there; and the step functions its ``make_train_function`` (test, predict) make. A Keras
release that renamed it would fail loudly; one that kept it but stopped calling it would leave
every metric, History and EarlyStopping decision silently per process. So each call checks that
the installed Keras still has every private name used here and that its trainer still calls
them, and refuses to start, naming the Keras version, when one is gone. An upper bound on Keras
in the package's requirements would not do: pip would quietly install another Keras instead.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

from trainmesh.keras.backend import require_keras

TESTED_WITH = "3.15.1"  # the Keras release the suite ran on


def _calls(function: Any, name: str) -> bool:
    """Whether ``function``'s own code (under its decorators) reads the attribute ``name``."""
    code = getattr(inspect.unwrap(function), "__code__", None)
    return code is not None and name in code.co_names


def _step_functions_missing(trainer: type) -> list[str]:
    """Keras' torch trainer's step-function makers, routed on that class (routes.py), and their use."""
    gone = []
    for method, kind in (("fit", "train"), ("evaluate", "test"), ("predict", "predict")):
        maker = f"make_{kind}_function"
        if maker not in vars(trainer):
            gone.append(f"TorchTrainer.{maker} (each {kind} step, routes.py)")
        for name in (maker, f"{kind}_function"):
            if not _calls(getattr(trainer, method), name):
                gone.append(f"TorchTrainer.{method} no longer uses {name} (each {kind} step, routes.py)")
    return gone


def missing() -> list[str]:
    """Each internal that the installed Keras lacks, with what relies on it (empty: all there)."""
    keras = require_keras()
    from keras.src import backend as keras_backend
    from keras.src.backend.torch.trainer import TorchTrainer
    from keras.src.layers.layer import Layer
    from keras.src.layers.normalization.batch_normalization import BatchNormalization
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    gone = []
    for owner, name, needed_by in (
        (TorchTrainer, "_get_metrics_result_or_logs", "the metric sums (sync.py)"),
        (TorchTrainer, "compute_metrics", "coupled metrics on the global batch (batch_metrics.py)"),
        (TorchTrainer, "_should_torch_compile", "the step functions, compiled as Keras compiles them (routes.py)"),
        (Layer, "_flatten_layers", "the BatchNormalization averages (sync.py)"),
        (BatchNormalization, "_moments", "the global batch's moments in training steps (batch_statistics.py)"),
        (BaseOptimizer, "add_variable_from_reference", "zero1's optimizer slots (zero.py)"),
        (BaseOptimizer, "finalize_variable_values", "zero1's gather at fit's end (zero.py)"),
        (keras.callbacks.ModelCheckpoint, "_should_save_on_batch", "zero1's gather before a save (zero.py)"),
        (keras.callbacks.BackupAndRestore, "_should_save_on_batch", "zero1's gather before a backup (zero.py)"),
    ):
        if not callable(getattr(owner, name, None)):
            gone.append(f"{owner.__name__}.{name} ({needed_by})")
    gone += _step_functions_missing(TorchTrainer)
    for method, name, needed_by in (
        ("fit", "_get_metrics_result_or_logs", "the training and validation metric sums"),
        ("evaluate", "_get_metrics_result_or_logs", "the evaluation metric sums"),
        ("fit", "_initial_epoch", "BackupAndRestore's epoch, broadcast from rank 0"),
        ("train_step", "apply", "the gradient average before optimizer.apply"),
    ):
        if not _calls(getattr(TorchTrainer, method), name):
            gone.append(f"TorchTrainer.{method} no longer uses {name} ({needed_by})")
    for name in ("normal", "uniform", "randint", "truncated_normal", "dropout"):
        if not callable(getattr(keras_backend.random, name, None)):
            gone.append(f"keras.src.backend.random.{name} (a step's draws at the global batch, draws.py)")
    from trainmesh.keras.optimizers import keras_classes_with_apply

    routed = keras_classes_with_apply()
    if not any(cls in routed for cls in type(keras.optimizers.SGD()).__mro__):
        gone.append("BaseOptimizer.apply (the gradient average of every optimizer a step applies, optimizers.py)")
    if not _calls(BaseOptimizer.apply_gradients, "apply"):
        gone.append("BaseOptimizer.apply_gradients no longer calls apply (the gradient average, optimizers.py)")
    optimizer = keras.optimizers.SGD()
    for name in ("_variables", "_iterations", "_trainable_variables", "_trainable_variables_indices", "_learning_rate"):
        if not hasattr(optimizer, name):
            gone.append(f"optimizer.{name} (zero1, zero.py)")
    gone += _imports_missing()
    return gone


def _imports_missing() -> list[str]:
    """The Keras modules and keys imported by name (data adapters, the global seed generator)."""
    gone = []
    try:
        from keras.src.trainers.data_adapters.array_slicing import train_validation_split  # noqa: F401
    except ImportError:
        gone.append("keras.src.trainers.data_adapters.array_slicing.train_validation_split (validation_split)")
    try:
        from keras.src.trainers.data_adapters import get_data_adapter  # noqa: F401
    except ImportError:
        gone.append("keras.src.trainers.data_adapters.get_data_adapter (the probe of a step's loss, step_probe.py)")
    from keras.src.random import seed_generator

    if getattr(seed_generator, "GLOBAL_SEED_GENERATOR", None) != "global_seed_generator":
        gone.append("Keras' global seed generator's key 'global_seed_generator' (carried to workers, global_seed.py)")
    return gone


@cache
def check() -> None:
    """Refuse to run on a Keras whose internals moved (once per process: they do not change)."""
    gone = missing()
    if gone:
        version = require_keras().__version__
        raise RuntimeError(
            f"trainmesh.keras relies on private parts of Keras that Keras {version} no longer has or no longer "
            f"calls: {'; '.join(gone)}. Without them the processes would not stay in step (metrics, gradients), "
            f"silently. trainmesh.keras was tested with Keras {TESTED_WITH}: install it "
            f"(pip install 'keras=={TESTED_WITH}'), or run Keras' own model.fit on one process"
        )
