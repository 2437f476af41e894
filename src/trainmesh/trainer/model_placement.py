"""A model's layers built and placed once per model object: ``configure_sharded_model`` (the name
Lightning 1.x and 2.0 used) and ``configure_model`` in the strategy's init context, the strategy's
placement (Lightning 1.x's ``on_post_move_to_device`` is not called: lightning1/legacy_hooks.py)."""

from __future__ import annotations

import warnings
from typing import Any

from torch import nn

from trainmesh.model_configuration import call_configure_model, configure_model_is_a_hook, configure_model_takes_mesh
from trainmesh.runtime import Runtime
from trainmesh.trainer.hooks import HookDispatcher
from trainmesh.utilities.rank_zero import global_rank_from_env


def place_model(model: nn.Module, runtime: Runtime, hooks: HookDispatcher, layer_sync: Any = None) -> nn.Module:
    """Build ``model``'s layers where the strategy wants them and place it; the placed model. A fit's
    ``layer_sync`` (``sync_batchnorm``) converts its layers first, where several processes train (as
    Lightning's parallel strategies do; one process has nothing to sync)."""
    name = type(model).__name__
    legacy = hooks.module_replaces("configure_sharded_model")
    if legacy and hooks.module_replaces("configure_model"):
        raise ValueError(
            f"{name} defines both configure_model and configure_sharded_model, its former name: which one builds "
            "the layers would be a guess. Keep configure_model alone"
        )
    if legacy:
        _deprecated(model, "configure_sharded_model", "Lightning's former name of configure_model; rename it")
    if (device_mesh := runtime.trainer_port.module_device_mesh) is not None:
        # Lightning's ModelParallelStrategy sets the module's mesh so before configure_model reads it
        model._device_mesh = device_mesh
    if legacy or configure_model_is_a_hook(model):  # not a 1.x module's method of its own (model_configuration.py)
        # the precision's too: layers built in the parameters' dtype under "64-true" etc., as Lightning's _call_configure_model
        with runtime.module_init_context(), runtime.precision.init_context():
            if legacy:
                hooks.call_module("configure_sharded_model")  # where Lightning 2.0 called it: before configure_model
            else:
                call_configure_model(model, runtime.mesh)
    if layer_sync is not None and runtime.world_size > 1:
        model = layer_sync.apply(model)
    placed = runtime.setup_module(model)
    return placed


def configure_placed_model(model: nn.Module, runtime: Runtime, hooks: HookDispatcher) -> None:
    """A later stage of the same Trainer on a model placed already (validate or test after fit): Lightning's
    ``_call_configure_model`` runs ``configure_sharded_model`` / ``configure_model`` at every stage, which is
    why its docs ask for an idempotent hook; a hook that is not (``self.teacher = copy.deepcopy(self.model)``)
    sees each call. Placement is not repeated, so a trainmesh hook taking the mesh (one that applies a
    parallelism to the layers) is not called again."""
    legacy = hooks.module_replaces("configure_sharded_model")
    if legacy or (configure_model_is_a_hook(model) and not configure_model_takes_mesh(model)):
        with runtime.module_init_context():
            if legacy:
                hooks.call_module("configure_sharded_model")
            else:
                model.configure_model()  # type: ignore[operator]


def _deprecated(model: nn.Module, hook: str, what: str) -> None:
    """One warning line, on global rank 0, pointing at the user's definition of ``hook``."""
    if global_rank_from_env() != 0:
        return
    code = getattr(getattr(type(model), hook), "__code__", None)
    warnings.warn_explicit(
        f"{type(model).__name__}.{hook} is {what}",
        FutureWarning,
        filename=code.co_filename if code is not None else "<unknown>",
        lineno=code.co_firstlineno if code is not None else 0,
    )
