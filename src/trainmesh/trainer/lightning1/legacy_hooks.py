"""Lightning 1.x hook names that no Lightning release we measure against calls: warned about, not called.

Ported programs still carry hooks that Lightning removed, and current programs carry them as dead
code (the UvA energy-model tutorial's callbacks define ``on_epoch_end``, which Lightning 2.x never
calls). pytorch-lightning 1.9.5 refuses some of them before the run (its ``configuration_validator``:
``REFUSED_BY_1_9``, recorded in tests/helpers/lightning_1_9_deprecations.json) and does not call the
rest; Lightning 2.0 dropped those refusals and ignores them all, so the same program runs under
Lightning 2.6. Calling them, as Lightning 1.7 and older did, would give numbers neither reference gives
(the energy-model tutorial's callbacks draw random numbers there, so its training differed from
Lightning 2.6's). So trainmesh runs what Lightning 2.x runs and says, once per run and hook, that the
hook is not called, what pytorch-lightning 1.9.5 did with it, and what replaces it: the module's and callbacks' ``on_epoch_start/end``,
``on_batch_start/end``, ``on_pretrain_routine_start/end``; the module's ``on_hpc_save/load``,
``get_progress_bar_dict``, ``on_{train,val,test,predict}_dataloader``, ``add_to_queue`` /
``get_from_queue``, ``on_post_move_to_device``; the callbacks' ``on_init_start/end``, ``on_before_accelerator_backend_setup``,
``on_configure_sharded_model``, ``on_keyboard_interrupt``; the data module's
``on_save_checkpoint`` / ``on_load_checkpoint``.

A callback's ``on_save_checkpoint`` that returns a value (Lightning 1.x stored it as the callback's
state until 1.6) is called as Lightning 2.x calls it: the value is not stored, and its
``on_load_checkpoint`` gets the whole checkpoint. pytorch-lightning 1.8 and 1.9 refuse the returned value
(a ValueError at the save), Lightning 2.x ignores it; the name is in both, so 2.x's behaviour holds, with
one line saying so.
"""

from __future__ import annotations

import inspect
from typing import Any

from trainmesh.utilities.rank_zero import rank_zero_warn

_EPOCH = "on_train_epoch_{0} (and on_validation_epoch_{0}, on_test_epoch_{0})"

# name -> the Lightning 2.x hook to use instead
MODULE_HOOKS: dict[str, str] = {
    "on_epoch_start": _EPOCH.format("start"),
    "on_epoch_end": _EPOCH.format("end"),
    "on_batch_start": "on_train_batch_start(batch, batch_idx)",
    "on_batch_end": "on_train_batch_end(outputs, batch, batch_idx)",
    "on_pretrain_routine_start": "on_fit_start",
    "on_pretrain_routine_end": "on_fit_start",
    "on_hpc_save": "on_save_checkpoint(checkpoint)",
    "on_hpc_load": "on_load_checkpoint(checkpoint)",
    "get_progress_bar_dict": "self.log(name, value, prog_bar=True)",
    "on_train_dataloader": "train_dataloader() (or setup(stage))",
    "on_val_dataloader": "val_dataloader() (or setup(stage))",
    "on_test_dataloader": "test_dataloader() (or setup(stage))",
    "on_predict_dataloader": "predict_dataloader() (or setup(stage))",
    "add_to_queue": "nothing: trainmesh hands callback_metrics, the weights and the callbacks' state back to the "
    "launching process itself; save anything else to a file",
    "get_from_queue": "nothing: read trainer.callback_metrics in the launching process",
    "on_post_move_to_device": "configure_model (or setup)",
}
CALLBACK_HOOKS: dict[str, str] = {
    "on_epoch_start": _EPOCH.format("start"),
    "on_epoch_end": _EPOCH.format("end"),
    "on_batch_start": "on_train_batch_start(trainer, module, batch, batch_idx)",
    "on_batch_end": "on_train_batch_end(trainer, module, outputs, batch, batch_idx)",
    "on_pretrain_routine_start": "on_fit_start",
    "on_pretrain_routine_end": "on_fit_start",
    "on_init_start": "the callback's __init__",
    "on_init_end": "setup(trainer, module, stage)",
    "on_before_accelerator_backend_setup": "setup(trainer, module, stage)",
    "on_configure_sharded_model": "setup(trainer, module, stage)",
    "on_keyboard_interrupt": "on_exception(trainer, module, exception) (it receives the KeyboardInterrupt)",
}
DATAMODULE_HOOKS: dict[str, str] = {
    "on_save_checkpoint": "state_dict()",
    "on_load_checkpoint": "load_state_dict(state_dict)",
    "on_train_dataloader": "train_dataloader() (or setup(stage))",
    "on_val_dataloader": "val_dataloader() (or setup(stage))",
    "on_test_dataloader": "test_dataloader() (or setup(stage))",
    "on_predict_dataloader": "predict_dataloader() (or setup(stage))",
}

# The hooks above that pytorch-lightning 1.9.5 refuses at the run's start (RuntimeError; the data module's:
# NotImplementedError); it runs without calling the others.
_EPOCH_AND_PRETRAIN = {"on_epoch_start", "on_epoch_end", "on_pretrain_routine_start", "on_pretrain_routine_end"}
REFUSED_BY_1_9: dict[str, set[str]] = {
    "module": _EPOCH_AND_PRETRAIN,
    "callback": set(CALLBACK_HOOKS) - {"on_keyboard_interrupt"},
    "datamodule": {"on_save_checkpoint", "on_load_checkpoint"},
}


def warn_legacy_hooks(hooks: Any) -> None:
    """One line for each Lightning 1.x hook the run's module or callbacks define, which is not called
    (``hooks``: the run's HookDispatcher, which only reads who defines them)."""
    if hooks.module is not None:
        for name, instead in MODULE_HOOKS.items():
            if hooks.module_overrides(name):
                _not_called(type(hooks.module).__name__, name, instead, "module")
    for name, instead in CALLBACK_HOOKS.items():
        for callback in hooks.callbacks_for(name):
            _not_called(type(callback).__name__, name, instead, "callback")


def warn_legacy_datamodule_hooks(datamodule: Any) -> None:
    for name, instead in DATAMODULE_HOOKS.items():
        if callable(getattr(type(datamodule), name, None)):
            _not_called(type(datamodule).__name__, name, instead, "datamodule")


def warn_returned_callback_state(callback: Any) -> None:
    rank_zero_warn(
        f"{type(callback).__name__}.on_save_checkpoint returns a value, which is not saved: Lightning 1.x until "
        "1.6 stored it as the callback's state, pytorch-lightning 1.8 and 1.9 refuse it (a ValueError), Lightning "
        "2.x ignores it and so does trainmesh; on_load_checkpoint gets the whole checkpoint. Return the state from "
        "state_dict() and take it back in load_state_dict(state)",
        stacklevel=3,
    )


def _not_called(owner: str, name: str, instead: str, kind: str) -> None:
    then = "stops before the run for it" if name in REFUSED_BY_1_9[kind] else "runs without calling it"
    rank_zero_warn(
        f"{owner}.{name} is not called: it is a Lightning 1.x hook that Lightning removed (pytorch-lightning "
        f"1.9.5 {then}, Lightning 2.x runs without calling it), so trainmesh runs what Lightning 2.x runs and "
        f"this code does not run. Use {instead} instead",
        stacklevel=3,
    )


def refuse_epoch_end_outputs(module: Any, callbacks: list[Any]) -> None:
    """At fit's start: an ``on_train_epoch_end`` that requires 1.x's ``outputs`` (``on_train_epoch_end(self,
    outputs)``; a callback's ``(self, trainer, pl_module, outputs)``), which Lightning passed until 1.5.
    pytorch-lightning 1.9.5 calls it without them and stops with a TypeError at the first epoch's end, after
    an epoch of training; trainmesh stops with the same type before the first batch, saying what replaces it."""
    owners = [(module, 0)] + [(callback, 2) for callback in callbacks]
    for owner, leading in owners:
        hook = getattr(owner, "on_train_epoch_end", None)
        if owner is None or hook is None:
            continue
        try:
            parameters = list(inspect.signature(hook).parameters.values())
        except (TypeError, ValueError):
            continue
        required = [
            p
            for p in parameters
            if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if len(required) > leading:
            extra = ", ".join(p.name for p in required[leading:])
            raise TypeError(
                f"{type(owner).__name__}.on_train_epoch_end requires {extra}: Lightning 1.x passed the epoch's "
                "step outputs there until 1.5; pytorch-lightning 1.9.5 and Lightning 2.x call it without them "
                "(1.9.5 stops with a TypeError at the first epoch's end). Take the outputs in "
                "training_epoch_end(self, outputs) (1.x), or keep them yourself from training_step and read them in "
                "on_train_epoch_end(self)"
            )
