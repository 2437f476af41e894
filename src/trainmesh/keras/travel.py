"""A Keras model on its way to spawned workers, with the program's own classes and functions.

Keras pickles a model as its ``.keras`` file (``KerasSaveable.__reduce__``) and rebuilds it from
the config, finding each class by its registered name: only Keras' own and those registered with
``keras.saving.register_keras_serializable`` (in a module the worker has imported). A program's own
layer, metric, loss or model class (keras-io's ``TokenAndPositionEmbedding``) is neither, so every
``ddp_spawn`` worker failed with ``Could not locate class``. The model travels inside
:class:`Travelling` instead: beside its bytes go the classes and functions its config names,
pickled by reference (their module and name), and the worker rebuilds the model inside
``keras.saving.custom_object_scope`` of them. Reference pickling reaches a class defined at the top
level of any module the worker can import, ``__main__`` included (a spawned worker runs the main
script as ``__mp_main__``); one defined inside a function, or in a ``__main__`` without a file
(``python -c``, a notebook), cannot travel, and the launch is refused before any process starts.

A rebuilt layer's unseeded initializers draw their seeds anew (Keras draws an initializer's seed from
Python's generator when it is made): a model that only ``fit`` builds would start from other weights
than the launching process's (and than Keras' own fit). Each such seed travels beside the model and
the rebuilt model's initializers take it back. Compiled metrics and a compiled loss the launching process
had built arrive built too, from the specs of the call's first samples (compiled_build.py).
"""

from __future__ import annotations

import pickle
import random
import sys
import types
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from trainmesh.keras.backend import is_keras_object, require_keras
from trainmesh.keras.compiled_build import build_compiled, built_parts, first_batch
from trainmesh.keras.custom_compile import (
    OptimizerState,
    optimizer_state,
    refuse_uncompiled_rebuild,
    restore_optimizer_state,
)
from trainmesh.launchers.spawn import RefusedToTravel


class Travelling:
    """``model`` as ``runtime.launch`` hands it to each process: itself where nothing is pickled
    (one process, ``ddp``, ``ddp_fork``), rebuilt with its own classes where it is (``ddp_spawn``).
    ``data``: the call's ``(x, y, sample_weight)`` (fit, evaluate), whose first samples' specs build the
    compiled metrics and loss the model had built."""

    def __init__(self, model: Any, data: tuple[Any, Any, Any] | None = None) -> None:
        self.model, self.data = model, data

    def __reduce__(self) -> tuple[Any, ...]:
        refuse_uncompiled_rebuild(self.model)
        objects, data = _saved(self.model)
        seeds = [initializer.seed for initializer in unseeded_initializers(self.model)]
        batch = _batch_to_build(self.model, self.data)
        unbuilt = not getattr(getattr(self.model, "optimizer", None), "built", True)
        state = optimizer_state(self.model)
        _check_rebuilds(self.model, objects, data, seeds, batch, unbuilt, state)
        return (_arrive, (objects, data, seeds, batch, unbuilt, state))


def _saved(model: Any) -> tuple[dict[str, Any], bytes]:
    """The program's own classes the model's config names, and the model's bytes as Keras pickles it (its
    ``.keras`` file); Keras' refusal to save it (a class of the
    program's own taking ``__init__`` arguments without a ``get_config``: keras-io's RecommenderNet) named as
    trainmesh's, before any process starts (before: it arrived inside the launcher's generic "cannot be pickled
    ... build it in setup()", the Trainer's advice, naming ``Travelling.model._tracker.config``)."""
    try:
        return own_objects(model), pickle.dumps(model)  # both read the model's config
    except RefusedToTravel:
        raise  # trainmesh's own reason (a class or function no worker can import), said once, with its own fix
    except Exception as err:  # noqa: BLE001 -- whatever Keras raises while saving the model
        said = " ".join(str(err).split("Example:")[0].split())  # Keras' reason, without its code sample
        raise RefusedToTravel(
            "ddp_spawn sends the Keras model to new processes by pickling it, which Keras does by saving it "
            f"(its .keras file, from each class's get_config), and Keras cannot save it ({type(err).__name__}: "
            f"{said}). Give each class of your own whose __init__ takes arguments a get_config() returning them, "
            "or use strategy='ddp_fork' or 'ddp', which start the processes without pickling the model"
        ) from None


def _batch_to_build(model: Any, data: tuple[Any, Any, Any] | None) -> Any:
    """The call's first samples where the model's compiled metrics or loss are built (None otherwise)."""
    if data is None or not built_parts(model):
        return None
    batch = first_batch(*data, model=model)
    if batch is None:
        raise RefusedToTravel(
            "ddp_spawn sends the Keras model to new processes, where its compiled metrics and loss (built here by "
            "an earlier fit or evaluate) arrive unbuilt, and trainmesh builds them from the specs of the data's first "
            f"samples, which it cannot take from this {type(data[0]).__name__} without iterating it (each worker's "
            "fit would then draw a seed from torch's generator one process does not, and train otherwise). Use "
            "strategy='ddp_fork' or 'ddp', which start the processes without pickling the model"
        )
    return batch


def unseeded_initializers(model: Any) -> list[Any]:
    """The random initializers made without a seed, of every layer (the model's own included), in the
    order of the layers and of their attributes' names: the same order in a model rebuilt from its config."""
    keras = require_keras()
    found = []
    for layer in model._flatten_layers(include_self=True):
        for _, value in sorted(vars(layer).items()):
            if isinstance(value, keras.initializers.Initializer) and getattr(value, "_init_seed", 0) is None:
                found.append(value)
    return found


def _check_rebuilds(
    model: Any,
    objects: dict[str, Any],
    data: bytes,
    seeds: list[Any],
    batch: Any,
    unbuilt: bool,
    state: OptimizerState,
) -> None:
    """Keras rebuilds the model from its config in each worker: tried here first, so that a class it
    cannot rebuild (keras-io's ``LogisticEndpoint(name=None)``, whose ``__init__`` takes none of the
    config's other entries) is refused before any process starts, not in every worker after it. The
    generators a rebuild draws seeds from are left as they were."""
    generators = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    try:
        arrived = _arrive(objects, data, seeds, batch, unbuilt, state).model
    except Exception as err:  # noqa: BLE001 -- whatever Keras raises while rebuilding
        raise RefusedToTravel(
            "ddp_spawn sends the Keras model to new processes, where Keras rebuilds it from its config, and "
            f"rebuilding it fails ({type(err).__name__}: {err}). Give each class of your own a get_config() "
            "whose entries its __init__ takes (with **kwargs for Keras' own: name, trainable, dtype), or use "
            "strategy='ddp_fork' or 'ddp', which start the processes without pickling the model"
        ) from None
    finally:
        torch.set_rng_state(generators[0])
        np.random.set_state(generators[1])
        random.setstate(generators[2])
    _refuse_lost_freeze(model, arrived)


def _refuse_lost_freeze(model: Any, arrived: Any) -> None:
    """Refused when what trains does not survive Keras' rebuild: a subclassed model's ``__init__`` makes its
    layers trainable, and a freeze set after construction (``model.body.trainable = False``) is in no config.
    Each worker trained the frozen layer, and the launching process then failed taking their optimizer state
    (slots for more variables), after the whole fit. Compared: which variables train, and each innermost layer's
    flag (a frozen BatchNormalization normalizes with its moving statistics); a container's own flag may differ
    (a functional model's frozen Sequential arrives trainable, its layers frozen: the same variables train)."""
    for mine, rebuilt in zip(_what_trains(model), _what_trains(arrived), strict=True):
        if mine[1] != rebuilt[1]:
            raise RefusedToTravel(
                f"ddp_spawn sends the Keras model to new processes, where Keras rebuilds it from its config, and "
                f"there its {mine[0]} is trainable={rebuilt[1]} where here it is trainable={mine[1]} (set after the "
                "model was made: the config of a subclassed model's layers does not keep it), so each process would "
                "train otherwise. Set the flag in the class's __init__ (self.body.trainable = False), or use "
                "strategy='ddp' or 'ddp_fork', which start the processes without pickling the model"
            )


def _what_trains(model: Any) -> list[tuple[str, bool]]:
    trains = {id(v) for v in model.trainable_variables}
    leaves = [layer for layer in model._flatten_layers(include_self=False) if not layer._layers and layer.weights]
    return [(f"layer {layer.name!r}", bool(layer.trainable)) for layer in leaves] + [
        (f"variable {v.path!r}", id(v) in trains) for v in model.weights
    ]


def _arrive(
    objects: dict[str, Any],
    data: bytes,
    seeds: list[Any],
    batch: Any = None,
    unbuilt: bool = False,
    state: OptimizerState = None,
) -> Travelling:
    with require_keras().saving.custom_object_scope(objects), warnings.catch_warnings():
        if (
            unbuilt or state is not None
        ):  # Keras' compile_from_config builds the rebuilt model's optimizer, then finds the sender's
            # unbuilt one (its iterations and learning rate, which the config carries) short of slots and warns
            # "Skipping variable loading": nothing of the sender's is lost, and Keras' own fit shows no warning. A
            # compile_from_config of the model's own may leave it unbuilt instead: the sender's state is restored below
            warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer", category=UserWarning)
        model = pickle.loads(data)
    restore_optimizer_state(model, state)
    for initializer, seed in zip(unseeded_initializers(model), seeds, strict=True):
        initializer.seed = seed  # the rebuild drew its own: the launching process's initializer draws the weights
    build_compiled(model, batch)  # as the launching process had them: the worker's fit does not build them
    return Travelling(model)


def own_objects(model: Any) -> dict[str, Any]:
    """The classes and functions outside Keras that the model's config names, by the names Keras
    looks them up by; refused (ValueError) when one cannot reach a spawned worker."""
    keras = require_keras()
    needed = set(_names_needed(keras.saving.serialize_keras_object(model)))
    found: dict[str, Any] = {}
    for obj in _reachable(model):
        name = keras.saving.get_registered_name(obj)
        if name in needed and not _in_keras(obj.__module__):
            found[name] = obj
    for name, obj in found.items():
        _refuse_unreachable(name, obj)
    return found


def _in_keras(module: str | None) -> bool:
    return module is not None and (module == "keras" or module.startswith("keras."))


def _names_needed(config: Any) -> Iterator[str]:
    """The names of the config's objects that Keras cannot find in its own modules."""
    if isinstance(config, dict):
        module = config.get("module")
        if "class_name" in config and not _in_keras(module):
            if config["class_name"] == "function" and isinstance(config.get("config"), str):
                yield config["config"]
            else:
                yield config.get("registered_name") or config["class_name"]
        for value in config.values():
            yield from _names_needed(value)
    elif isinstance(config, (list, tuple)):
        for value in config:
            yield from _names_needed(value)


def _reachable(root: Any) -> Iterator[Any]:
    """The class of every Keras object reachable from ``root`` through attributes and containers,
    and every plain function found there (an activation, a loss)."""
    variable = require_keras().Variable
    seen: set[int] = set()
    pending = [root]
    while pending:
        obj = pending.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (types.FunctionType, type)):
            yield obj
        elif isinstance(obj, dict):
            pending.extend(obj.values())
        elif isinstance(obj, (list, tuple, set)):
            pending.extend(obj)
        elif is_keras_object(obj) and not isinstance(obj, variable):
            yield type(obj)
            pending.extend(getattr(obj, "__dict__", {}).values())


def _refuse_unreachable(name: str, obj: Any) -> None:
    where = f"{obj.__module__}.{obj.__qualname__}"
    main = sys.modules.get("__main__")
    if "<locals>" in obj.__qualname__:
        why = "it is defined inside a function, where no other process can import it from"
    elif obj.__module__ == "__main__" and not getattr(main, "__file__", None):
        why = "it is defined in a __main__ without a file (python -c, a notebook), which a spawned process cannot run"
    else:
        try:
            pickle.dumps(obj)
            return
        except Exception as err:  # pickle raises several types (PicklingError, AttributeError, TypeError)
            why = f"it cannot be pickled by reference ({type(err).__name__}: {err})"
    raise RefusedToTravel(
        f"ddp_spawn sends the Keras model to new processes, where Keras rebuilds it from its config and must find "
        f"{name!r} ({where}) there, but {why}. Define it at the top level of a module (decorated with "
        "@keras.saving.register_keras_serializable() if you also load saved models without trainmesh), or use "
        "strategy='ddp_fork' or 'ddp', which start the processes without pickling the model"
    )
