"""Layers keeping a state between calls (a stateful RNN): refused where the processes do not return it.

A ``stateful=True`` RNN keeps each batch row's last state in variables Keras does not track (not in
``model.variables``, not saved), and its next call (the next batch, a later ``evaluate``/``predict``)
starts from them. Under ``ddp`` each process keeps its rows' states between calls, as one process keeps
them at the global batch (2 x 16 within 3e-7 of Keras' own fit, evaluate and predict at 32). Under
``ddp_spawn``/``ddp_fork`` the processes end with each call and return the variables only: the states
are lost, and the next call's workers start from the launching process's (zeros): measured, a stateful
SimpleRNN evaluated after a ``ddp_spawn`` fit read 1.3e-2 apart from Keras' own evaluate, its predictions
0.37 apart, silently. So such a model is refused before start there.
"""

from __future__ import annotations

from typing import Any


def stateful_layer_names(model: Any) -> list[str]:
    layers = model._flatten_layers(include_self=False) if hasattr(model, "_flatten_layers") else []
    return [layer.name for layer in layers if getattr(layer, "stateful", False)]


def refuse_stateful_across_calls(model: Any, runtime: Any, what: str) -> None:
    """Under a launch whose processes end with the call (ddp_spawn, ddp_fork): a stateful layer refused."""
    from trainmesh.launchers.spawn import SpawnLauncher

    if not isinstance(runtime.launcher, SpawnLauncher):
        return
    names = stateful_layer_names(model)
    if names:
        method = runtime.launcher.start_method
        raise ValueError(
            f"the model's layer {names[0]!r} is stateful (stateful=True): it carries each batch row's state from "
            f"one call to the next (batches, then evaluate and predict), in variables Keras does not save. "
            f"Under the {method} launch the processes end with each tk.{what} and return the model's variables "
            "only, so its states are lost between calls and the next call starts from other states than Keras' "
            "own. Use strategy='ddp', whose processes keep their states between calls, or run on one process"
        )
