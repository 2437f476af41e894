"""``with trainmesh.keras.distribute(strategy="ddp", devices=2): ... model.fit(...)``: the user's own
calls, distributed, as under TensorFlow's ``with MirroredStrategy().scope():``.

Inside the block, ``fit``, ``evaluate`` and ``predict`` of every Keras model are this package's
(training.py) with the block's strategy, devices and nodes: the same runs as ``tk.fit(model, ...)``,
so the same checks, refusals and results. The block changes Keras' ``Model`` class for its length
only; the calls trainmesh makes to Keras' own methods inside a run reach Keras itself. Under
``strategy="ddp"`` the script runs again in each process, the block included.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from trainmesh.keras import training
from trainmesh.keras.backend import require_keras

_open = [False]  # a block is open in this process
_inside_a_run = [False]  # while trainmesh runs a call: the model's methods are Keras' own again


@contextlib.contextmanager
def distribute(
    strategy: str | Any = "ddp",
    *,
    accelerator: str = "cpu",
    devices: int | str | list[int] = 1,
    num_nodes: int = 1,
) -> Iterator[None]:
    """Every Keras model's ``fit``/``evaluate``/``predict`` run by trainmesh within the block.

    Args:
        strategy: ``"ddp"``, ``"ddp_spawn"``, ``"ddp_fork"`` or ``"zero1"`` (default ``'ddp'``).
        accelerator: ``"cpu"`` (several processes on GPUs are refused for now) (default ``'cpu'``).
        devices: processes per node (default ``1``).
        num_nodes: nodes (under torchrun/SLURM) (default ``1``).

    Examples:
        >>> import trainmesh.keras as tk
        >>> with tk.distribute(strategy="ddp", devices=2):  # doctest: +SKIP
        ...     model.fit(x, y, batch_size=32, epochs=2)
    """
    model_class = require_keras().Model
    if _open[0]:
        raise RuntimeError("trainmesh.keras.distribute blocks do not nest: close the first before opening another")
    launch = {"strategy": strategy, "accelerator": accelerator, "devices": devices, "num_nodes": num_nodes}
    keras_methods = {name: vars(model_class).get(name) for name in _METHODS}
    for name, ours in _METHODS.items():
        setattr(model_class, name, _routed(getattr(model_class, name), ours, launch))
    _open[0] = True
    try:
        yield
    finally:
        _open[0] = False
        for name, method in keras_methods.items():
            if method is None:
                delattr(model_class, name)  # inherited (from Keras' trainer): found there again
            else:
                setattr(model_class, name, method)


_METHODS: dict[str, Callable[..., Any]] = {
    "fit": training.fit,
    "evaluate": training.evaluate,
    "predict": training.predict,
}


def _routed(keras_method: Callable[..., Any], ours: Callable[..., Any], launch: dict[str, Any]) -> Callable[..., Any]:
    @functools.wraps(keras_method)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _inside_a_run[0]:
            return keras_method(self, *args, **kwargs)
        _inside_a_run[0] = True
        try:
            return ours(self, *args, **launch, **kwargs)
        finally:
            _inside_a_run[0] = False

    return method
