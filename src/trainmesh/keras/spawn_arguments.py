"""What ``ddp_spawn`` pickles beside the model (the data, the callbacks, every other argument of
``fit``/``evaluate``/``predict``): refused before any process starts in a Keras user's words.

The launcher's own check (launchers/spawn.py) names the part that cannot be pickled, but its advice,
"build it in setup()", is the Trainer's; Keras has no ``setup()``. keras-io's usual
``LearningRateScheduler(lambda epoch, lr: ...)`` written inside a function is such a part.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import torch

from trainmesh.launchers.spawn import RefusedToTravel
from trainmesh.runtime import Runtime

_POSITIONAL = ("x", "y")  # the call's arrays or loaders, after the travelling model


def refuse_unpicklable_arguments(runtime: Runtime, args: tuple[Any, ...]) -> None:
    """Under a launcher that pickles (``ddp_spawn``), the first argument that cannot travel, refused with
    its path (``callbacks[0].schedule``) and what a Keras program can do instead. ``args``: what the launch
    hands each process after the runtime, the model (which has its own refusals: travel.py) among them."""
    if getattr(runtime.launcher, "start_method", "fork") == "fork":  # ddp_fork, ddp, torchrun: nothing pickled
        return
    from trainmesh.keras.travel import Travelling  # travel.py imports Keras' saving: only where it is used

    labelled: list[tuple[str, Any]] = []
    for value in (arg for arg in args if not isinstance(arg, Travelling)):
        if isinstance(value, dict):
            labelled.extend(value.items())
        elif len(labelled) < len(_POSITIONAL):
            labelled.append((_POSITIONAL[len(labelled)], value))
    for label, value in labelled:
        if isinstance(value, (np.ndarray, torch.Tensor)):  # always picklable: not copied once more here
            continue
        try:
            pickle.dumps(value)
        except Exception as err:  # noqa: BLE001 -- pickle raises several types (PicklingError, TypeError, ...)
            path, err = _unpicklable_part(label, value, err, depth=3)
            raise RefusedToTravel(
                f"ddp_spawn sends the call's arguments to new processes by pickling them, and {path} cannot be pickled "
                f"({type(err).__name__}: {err}). Define the function or class it holds at the top level of a module "
                "(a def instead of a lambda or a function nested in another), or make the callback build what "
                "cannot be pickled in its on_train_begin(); or use strategy='ddp' or 'ddp_fork', which start the "
                "processes without pickling"
            ) from None


def _unpicklable_part(path: str, value: Any, err: Exception, *, depth: int) -> tuple[str, Exception]:
    """The deepest item or attribute under ``value`` that fails to pickle (``callbacks[0].schedule``), with
    its error."""
    if depth == 0:
        return path, err
    if isinstance(value, dict):
        children = [(f"{path}[{key!r}]", item) for key, item in value.items()]
    elif isinstance(value, (list, tuple)):
        children = [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    else:
        children = [(f"{path}.{name}", item) for name, item in sorted(getattr(value, "__dict__", {}).items())]
    for child_path, child in children:
        try:
            pickle.dumps(child)
        except Exception as child_err:  # noqa: BLE001 -- as above
            return _unpicklable_part(child_path, child, child_err, depth=depth - 1)
    return path, err
