"""A model class with a ``compile()`` of its own (keras-io's ZeroDCE: ``compile(self, learning_rate)`` making its
optimizer, losses and trackers) on its way to ``ddp_spawn``'s workers.

Keras pickles a model as its ``.keras`` file and rebuilds it from the config; its ``compile_from_config``
skips a ``compile()`` the class overrides (warning "`compile()` was not called as part of model loading")
unless the class overrides ``compile_from_config`` too, yet marks the model compiled: every worker then
failed in ``fit`` with "no attribute 'optimizer'". Such a model is refused before any process starts,
with Keras' own advice. A class that follows it (``get_compile_config`` returning compile's arguments,
``compile_from_config`` calling ``self.compile(**config)``) arrives compiled, but its optimizer unbuilt
where Keras' own ``compile_from_config`` builds it before loading the saved slots: Keras skips the
sender's optimizer state ("Skipping variable loading"), and a second ``fit`` would start Adam's moments
from zero where one process goes on with them (before: 0.66 apart in History). That state travels
beside the model and is put back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainmesh.keras.backend import require_keras
from trainmesh.launchers.spawn import RefusedToTravel

# The sender's optimizer variables (name, value), where it is built; None where it is not.
OptimizerState = list[tuple[str, np.ndarray]] | None


def refuse_uncompiled_rebuild(model: Any) -> None:
    """Refused when Keras' rebuild of the compiled ``model`` would skip its class's own ``compile()``."""
    keras = require_keras()
    cls = type(model)
    if not getattr(model, "compiled", False) or cls.compile is keras.Model.compile:
        return
    if cls.compile_from_config is not keras.Model.compile_from_config:
        return
    raise RefusedToTravel(
        f"ddp_spawn sends the Keras model to new processes, where Keras rebuilds it from its saved config; "
        f"{cls.__name__} overrides compile(), and Keras does not call a compile() of the model's own when it "
        'rebuilds a model (it warns "`compile()` was not called as part of model loading"): each process\'s '
        f"model would have no optimizer, loss or metrics. Give {cls.__name__} a get_compile_config() returning "
        "compile()'s arguments and a compile_from_config(config) calling self.compile(**config) (Keras' advice "
        "for a custom compile), or use strategy='ddp' or 'ddp_fork', which start the processes without "
        "pickling the model"
    )


def optimizer_state(model: Any) -> OptimizerState:
    """The sender's optimizer variables, by name, where it is built (a fit ran before) and the class has a
    compile_from_config of its own (Keras' own builds the optimizer and loads the saved state itself: nothing
    travels twice)."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or not optimizer.built:
        return None
    if type(model).compile_from_config is require_keras().Model.compile_from_config:
        return None
    return [(variable.name, np.array(variable.numpy())) for variable in optimizer.variables]


def restore_optimizer_state(model: Any, state: OptimizerState) -> None:
    """The sender's optimizer state in the rebuilt ``model``, where its compile_from_config left the optimizer
    unbuilt (Keras' own builds it and loads the state itself)."""
    optimizer = getattr(model, "optimizer", None)
    if state is None or optimizer is None or optimizer.built:
        return
    optimizer.build(model.trainable_variables)  # as Keras' own compile_from_config builds it
    # by position, as Keras' own loader puts an optimizer's saved variables back (the rebuilt layers' names differ)
    shapes = [tuple(variable.shape) for variable in optimizer.variables]
    if shapes != [value.shape for _, value in state]:
        raise ValueError(
            f"the rebuilt model's optimizer has {len(shapes)} variables of other shapes than the launching "
            f"process's {len(state)} ({[name for name, _ in state][:6]} ...), so its state (Adam's moments, its "
            "iterations) cannot be restored"
        )
    for variable, (_, value) in zip(optimizer.variables, state, strict=True):
        variable.assign(value)
