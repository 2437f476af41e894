"""Lightning hook names that trainmesh never calls, refused before a run starts.

A Lightning program brought to trainmesh may override a hook that trainmesh has no call for; the
run would then train with that code never run, and say nothing: the worst kind of wrong run. So a
module or callback that defines one of these names stops fit/validate/test/predict at its start
with the hook, the class, and what to use instead.

The lists hold only names Lightning (2.x, or 1.x where a ported program still carries them) calls
and trainmesh does not; tests/trainer/test_unsupported_hooks.py checks that no name here is ever
called and that every one of them is refused. A hook trainmesh starts calling leaves these lists.
"""

from __future__ import annotations

from typing import Any

_IN_TRAINING_STEP = "do it at the start of training_step (and validation_step, ...)"

# LightningModule hooks: name -> what to use instead.
MODULE_HOOKS: dict[str, str] = {
    "transfer_batch_to_device": "batches reach the step hooks already on the device; transform them in the "
    f"dataset or collate_fn, or {_IN_TRAINING_STEP}",
    "on_before_batch_transfer": f"transform batches in the dataset or collate_fn, or {_IN_TRAINING_STEP}",
    "on_after_batch_transfer": f"{_IN_TRAINING_STEP}",
    "configure_callbacks": "pass the callbacks to Trainer(callbacks=[...])",
    "configure_sharded_model": "rename it configure_model (Lightning's own replacement), which trainmesh calls",
    "on_before_optimizer_setup": "freeze or change parameters at the end of configure_model, or in "
    "configure_optimizers before building the optimizer",
    "on_validation_model_eval": "trainmesh calls model.eval() for validation itself; put extra work in "
    "on_validation_start",
    "on_validation_model_train": "trainmesh restores the training mode after validation itself; put extra work "
    "in on_validation_end",
    "on_validation_model_zero_grad": "gradients are already None when validation starts (zeroed after each "
    "optimizer step); put other work in on_validation_start",
    "on_test_model_eval": "trainmesh calls model.eval() for testing itself; put extra work in on_test_start",
    "on_test_model_train": "put the work in on_test_end",
    "on_predict_model_eval": "trainmesh calls model.eval() for prediction itself; put extra work in on_predict_start",
    "prepare_data": "define prepare_data on a DataModule (trainmesh calls it once per machine), or do the work "
    "in setup(stage)",
    # Lightning 1.x hooks, gone from 2.x, still found in ported programs.
    "on_epoch_start": "use on_train_epoch_start (and on_validation_epoch_start, ...)",
    "on_epoch_end": "use on_train_epoch_end (and on_validation_epoch_end, ...)",
    "on_batch_start": "use on_train_batch_start(batch, batch_idx)",
    "on_batch_end": "use on_train_batch_end(outputs, batch, batch_idx)",
    "on_pretrain_routine_start": "use on_fit_start",
    "on_pretrain_routine_end": "use on_train_start",
    "on_post_move_to_device": "use setup(stage) or configure_model",
    "on_hpc_save": "use on_save_checkpoint(checkpoint)",
    "on_hpc_load": "use on_load_checkpoint(checkpoint)",
    "get_progress_bar_dict": "show values with self.log(name, value, prog_bar=True)",
}

# Callback hooks: name -> what to use instead.
CALLBACK_HOOKS: dict[str, str] = {
    "on_before_optimizer_setup": "use setup(trainer, module, stage): it runs before configure_optimizers",
    # Lightning 1.x hooks, gone from 2.x, still found in ported programs.
    "on_init_start": "do the work in the callback's __init__",
    "on_init_end": "do the work in setup(trainer, module, stage)",
    "on_configure_sharded_model": "use setup(trainer, module, stage)",
    "on_before_accelerator_backend_setup": "use setup(trainer, module, stage)",
    "on_epoch_start": "use on_train_epoch_start (and on_validation_epoch_start, ...)",
    "on_epoch_end": "use on_train_epoch_end (and on_validation_epoch_end, ...)",
    "on_batch_start": "use on_train_batch_start(trainer, module, batch, batch_idx)",
    "on_batch_end": "use on_train_batch_end(trainer, module, outputs, batch, batch_idx)",
    "on_pretrain_routine_start": "use on_fit_start",
    "on_pretrain_routine_end": "use on_train_start",
    "on_keyboard_interrupt": "use on_exception(trainer, module, exception): it receives the KeyboardInterrupt",
}


# LightningDataModule hooks: name -> what to use instead.
DATAMODULE_HOOKS: dict[str, str] = {
    "transfer_batch_to_device": "batches are moved to the device by the strategy; transform them in the dataset "
    f"or collate_fn, or {_IN_TRAINING_STEP}",
    "on_before_batch_transfer": f"transform batches in the dataset or collate_fn, or {_IN_TRAINING_STEP}",
    "on_after_batch_transfer": f"{_IN_TRAINING_STEP}",
    "on_exception": "use a callback's on_exception(trainer, module, exception)",
    # Lightning 1.x, replaced by state_dict / load_state_dict (which trainmesh calls).
    "on_save_checkpoint": "return the state from state_dict(); trainmesh saves it in every checkpoint",
    "on_load_checkpoint": "restore it in load_state_dict(state_dict)",
}


def refuse_uncalled_datamodule_hooks(datamodule: Any) -> None:
    """The check of ``refuse_uncalled_hooks`` for a DataModule, before its prepare_data runs."""
    _refuse([(datamodule, DATAMODULE_HOOKS, "data module")])


def refuse_uncalled_hooks(module: Any, callbacks: list[Any]) -> None:
    """Stop with an error naming the first Lightning hook that ``module`` or a callback defines
    and trainmesh never calls. Read from the classes once per run, before anything runs."""
    owners: list[tuple[Any, dict[str, str], str]] = [(module, MODULE_HOOKS, "module")]
    owners += [(callback, CALLBACK_HOOKS, "callback") for callback in callbacks]
    _refuse(owners)


def _refuse(owners: list[tuple[Any, dict[str, str], str]]) -> None:
    for owner, names, kind in owners:
        for name, instead in names.items():
            if callable(getattr(type(owner), name, None)):
                raise ValueError(
                    f"{type(owner).__name__}.{name}: {name} is a Lightning {kind} hook that trainmesh never calls, "
                    f"so this code would not run and the run would be silently different. Instead: {instead}. "
                    f"Remove or rename the method"
                )
