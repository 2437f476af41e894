"""Lightning 1.x hook names, called where Lightning 1.x called them, each with one deprecation line.

Ported programs still carry hooks that Lightning 2.0 removed. Each had a meaning in 1.x, and
trainmesh calls it at the same point (read from pytorch-lightning 1.5.10 and 1.6.5:
``trainer/trainer.py``, ``loops/``, ``trainer/connectors/checkpoint_connector.py``), callbacks
before the module as 1.x did:

- ``on_epoch_start`` / ``on_epoch_end`` (module, callback): around every training, validation
  (the sanity check's too) and test epoch: before ``on_{train,validation,test}_epoch_start``,
  after ``on_*_epoch_end``. Not around prediction.
- ``on_batch_start`` / ``on_batch_end`` (module, callback): around every training batch, before
  ``on_train_batch_start`` and after ``on_train_batch_end``; the module's ``on_batch_start`` may
  return -1 to end the epoch (1.5).
- ``on_pretrain_routine_start`` / ``on_pretrain_routine_end`` (module, callback): in fit, after
  ``on_fit_start``, before the sanity check.
- ``on_hpc_save(checkpoint)`` / ``on_hpc_load(checkpoint)`` (module): 1.x's SLURM ("hpc") save
  and resume: the checkpoint a stop signal (SIGTERM/SIGUSR1, supervision/preemption.py) saves,
  after ``on_save_checkpoint``; the resume of the restarted or requeued run from it, after
  ``on_load_checkpoint``.
- ``get_progress_bar_dict()`` (module): the progress bar's standard items (``loss``, ``v_num``),
  which an override replaces (publishing.progress_bar_metrics).
- ``on_init_start(trainer)`` / ``on_init_end(trainer)`` (callback): in ``Trainer.__init__``, once
  the callbacks are known, and at its end.
- ``on_before_accelerator_backend_setup`` (callback): after ``prepare_data``, before the setup hooks.
- ``configure_sharded_model()`` (module; Lightning 2.x still calls it) then
  ``on_configure_sharded_model`` (callback): with ``configure_model``.
- ``on_keyboard_interrupt`` (callback): on Ctrl-C, before ``on_exception``.
- ``on_save_checkpoint(checkpoint)`` / ``on_load_checkpoint(checkpoint)`` (data module): after
  the module's ``on_save_checkpoint``; first of all when a checkpoint is restored.
- ``on_train_dataloader`` / ``on_val_dataloader`` / ``on_test_dataloader`` /
  ``on_predict_dataloader`` (module; 1.6's ``data_connector._request_dataloader``): just before
  that stage's dataloader is requested, whether it comes from the module, a data module or an
  argument. 1.x called the module's only, so a data module's is warned about, not called.
- ``add_to_queue(queue)`` / ``get_from_queue(queue)`` (module; 1.6's ``launchers/spawn.py``): in
  a run whose workers report to the launching process (``ddp_spawn``): ``add_to_queue`` on global
  rank 0 after the stage, ``get_from_queue`` in the launching process with what was put (a list
  with ``put``/``get``/``empty``, 1.6's ``_FakeQueue``). Not called in a run without a parent.
- A callback's ``on_save_checkpoint`` that returns a value (1.6's
  ``_call_callbacks_on_save_checkpoint``): the value is stored as the callback's state
  (``checkpoint["callbacks"][state_key]``, in place of its ``state_dict()``), and on a restore
  its ``on_load_checkpoint(trainer, module, callback_state)`` gets that state, not the checkpoint
  (checkpointing.py; the checkpoint lists those keys under ``LEGACY_CALLBACK_STATES``).
"""

from __future__ import annotations

from typing import Any

from trainmesh.callbacks.base import defines_hook
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.rank_zero import rank_zero_deprecation, rank_zero_warn

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
}
# stage -> the 1.x hook called just before its dataloader is requested
DATALOADER_HOOKS = {
    "train": "on_train_dataloader",
    "validate": "on_val_dataloader",
    "test": "on_test_dataloader",
    "predict": "on_predict_dataloader",
}
# The checkpoint entry listing the callbacks whose state 1.x's on_save_checkpoint returned.
LEGACY_CALLBACK_STATES = "callback_states_from_on_save_checkpoint"
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
_INIT_HOOKS = ("on_init_start", "on_init_end")
DATAMODULE_HOOKS: dict[str, str] = {
    "on_save_checkpoint": "state_dict()",
    "on_load_checkpoint": "load_state_dict(state_dict)",
}


def warn_legacy_hooks(hooks: Any) -> None:
    """One deprecation line for each Lightning 1.x hook the run's module or callbacks define
    (``hooks``: the run's HookDispatcher)."""
    if hooks.module is not None:
        for name, instead in MODULE_HOOKS.items():
            if hooks.module_overrides(name):
                _deprecation(type(hooks.module).__name__, name, instead)
    for name, instead in CALLBACK_HOOKS.items():
        if name in _INIT_HOOKS:
            continue  # called, and warned about, when the Trainer is built
        for callback in hooks.callbacks_for(name):
            _deprecation(type(callback).__name__, name, instead)


def warn_legacy_datamodule_hooks(datamodule: Any) -> None:
    for name, instead in DATAMODULE_HOOKS.items():
        if callable(getattr(type(datamodule), name, None)):
            _deprecation(type(datamodule).__name__, name, instead)
    for name in DATALOADER_HOOKS.values():
        if callable(getattr(type(datamodule), name, None)):
            rank_zero_warn(
                f"{type(datamodule).__name__}.{name} is not called: Lightning 1.x called this hook on the "
                f"LightningModule only (never on a data module), and 2.0 removed it. Do its work in "
                f"{name.removeprefix('on_')}() or setup(stage)"
            )


def call_dataloader_hook(model: Any, stage: str) -> None:
    """The module's 1.x ``on_<stage>_dataloader()``, where it defines one (its deprecation line
    came with the run's other 1.x hooks)."""
    method = getattr(model, DATALOADER_HOOKS[stage], None)
    if model is not None and callable(method):
        method()


class LegacyQueue(list[Any]):
    """What 1.x's ``add_to_queue`` / ``get_from_queue`` received (1.6's ``_FakeQueue``): a list
    with a queue's ``put`` / ``get`` / ``empty``."""

    def put(self, item: Any) -> None:
        self.append(item)

    def get(self) -> Any:
        return self.pop(0)

    def empty(self) -> bool:
        return not self


def call_datamodule_hook(datamodule: Any, name: str, *args: Any) -> None:
    """A data module's 1.x checkpoint hook, where it defines one (a duck-typed data module may not)."""
    method = getattr(datamodule, name, None)
    if datamodule is not None and callable(method):
        method(*args)


def call_init_hook(callbacks: list[Any], name: str, trainer: TrainerView) -> None:
    """``on_init_start`` / ``on_init_end`` (``trainer`` only), on the callbacks that define it."""
    for callback in callbacks:
        if defines_hook(callback, name):
            _deprecation(type(callback).__name__, name, CALLBACK_HOOKS[name])
            getattr(callback, name)(trainer)


def warn_returned_callback_state(callback: Any) -> None:
    rank_zero_deprecation(
        f"{type(callback).__name__}.on_save_checkpoint returns a value: Lightning 1.x stored it as the "
        "callback's state and passed it to on_load_checkpoint(trainer, module, callback_state), and trainmesh "
        "does so too; Lightning 2.0 removed this. Use state_dict() to return the state and "
        "load_state_dict(state) to take it back",
        stacklevel=3,
    )


def _deprecation(owner: str, name: str, instead: str) -> None:
    rank_zero_deprecation(
        f"{owner}.{name} is a Lightning 1.x hook, removed in Lightning 2.0; trainmesh calls it where Lightning 1.x "
        f"did. Use {instead} instead",
        stacklevel=3,
    )
