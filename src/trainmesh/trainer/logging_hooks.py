"""Where ``self.log`` may be called, as Lightning 2.6 decides it (its ``_FxValidator`` in
``logger_connector/fx_validator.py``, and ``LightningModule.log``'s check of the result collection,
which a prediction run has none of): the hooks Lightning refuses logging in raise its
``MisconfigurationException``. trainmesh knows the running hook where the Trainer calls it through
its hook dispatcher (the log collector's ``fx``); a hook it does not track is not refused."""

from __future__ import annotations

from trainmesh.utilities.exceptions import MisconfigurationException

# Lightning 2.6.6's hooks whose logging levels are None: self.log there raises
NO_LOGGING = frozenset(
    {
        "lr_scheduler_step",
        "on_fit_start",
        "on_fit_end",
        "on_sanity_check_start",
        "on_sanity_check_end",
        "on_train_end",
        "on_validation_end",
        "on_test_end",
        "on_before_batch_transfer",
        "transfer_batch_to_device",
        "on_after_batch_transfer",
        "on_exception",
        "state_dict",
        "on_save_checkpoint",
        "on_load_checkpoint",
        "load_state_dict",
        "setup",
        "teardown",
        "configure_sharded_model",
        "configure_model",
        "configure_optimizers",
        "train_dataloader",
        "val_dataloader",
        "test_dataloader",
        "prepare_data",
        "configure_callbacks",
        "on_validation_model_zero_grad",
        "on_validation_model_eval",
        "on_test_model_eval",
        "on_validation_model_train",
        "on_test_model_train",
    }
)


# The log collector's hook once its stage has ended (Lightning's trainer._results is None without a
# running loop: self.log after fit raises as in a prediction run)
NO_LOOP = ""


def check_can_log(hook: str, fx: str) -> None:
    """Raise Lightning's error where it refuses ``self.log``: in any hook of a prediction run
    (``hook``: the running stage's step hook) or outside any stage (:data:`NO_LOOP`), or in a hook of
    :data:`NO_LOGGING` (``fx``: the hook running).

    >>> check_can_log("training_step", "on_train_batch_end")
    """
    if hook == "predict_step" or fx == "predict_step" or fx.startswith("on_predict") or fx == NO_LOOP:
        raise MisconfigurationException(
            "You are trying to `self.log()` but the loop's result collection is not registered"
            " yet. This is most likely because you are trying to log in a `predict` hook,"
            " but it doesn't support logging"
        )
    if fx in NO_LOGGING:
        raise MisconfigurationException(
            f"You can't `self.log()` inside `{fx}`. HINT: You can still log directly to the logger by using"
            " `self.logger.experiment`."
        )


# Where a hook may log and what it logs by default, as Lightning's _FxValidator table (2.6.6; 1.9.5's
# *_step_end and *_epoch_end hooks of 1.x programs too): (allowed on_step, allowed on_epoch, default
# on_step, default on_epoch). The hooks of NO_LOGGING refuse self.log; a hook in neither logs with its
# stage's defaults (per step in training_step's stage, per epoch in evaluation).
_STEP = ((False, True), (False, True), True, False)
_EPOCH = ((False, True), (False, True), False, True)
_EPOCH_ONLY = ((False,), (True,), False, True)
LEVELS: dict[str, tuple[tuple[bool, ...], tuple[bool, ...], bool, bool]] = {
    **dict.fromkeys(
        (
            "on_before_backward",
            "backward",
            "on_after_backward",
            "on_before_optimizer_step",
            "optimizer_step",
            "configure_gradient_clipping",
            "clip_gradients",
            "on_before_zero_grad",
            "optimizer_zero_grad",
            "on_train_batch_start",
            "on_train_batch_end",
            "training_step",
            "training_step_end",
        ),
        _STEP,
    ),
    **dict.fromkeys(
        (
            "on_validation_batch_start",
            "on_validation_batch_end",
            "on_test_batch_start",
            "on_test_batch_end",
            "validation_step",
            "test_step",
            "validation_step_end",
            "test_step_end",
        ),
        _EPOCH,
    ),
    **dict.fromkeys(
        (
            "on_train_start",
            "on_validation_start",
            "on_test_start",
            "on_train_epoch_start",
            "on_train_epoch_end",
            "on_validation_epoch_start",
            "on_validation_epoch_end",
            "on_test_epoch_start",
            "on_test_epoch_end",
            "training_epoch_end",
            "validation_epoch_end",
            "test_epoch_end",
        ),
        _EPOCH_ONLY,
    ),
}


def resolve_levels(fx: str, stage_step: bool, on_step: bool | None, on_epoch: bool | None) -> tuple[bool, bool]:
    """``on_step`` and ``on_epoch`` of a ``self.log`` call in the hook ``fx``: those given, else the hook's
    defaults (``stage_step``: per step, for a hook Lightning's table does not name); Lightning's error where
    the hook allows no such level (an epoch hook has no step to log at).

    >>> resolve_levels("on_train_epoch_start", True, None, None)
    (False, True)
    >>> resolve_levels("on_train_epoch_start", True, True, None)
    Traceback (most recent call last):
    ...
    trainmesh.utilities.exceptions.MisconfigurationException: You can't `self.log(on_step=True)` inside `on_train_epoch_start`, must be one of (False,). Log it in a batch hook (training_step, on_train_batch_end, ...) for a value per step, or leave on_step unset here
    """
    levels = LEVELS.get(fx)
    if levels is None:
        return (stage_step if on_step is None else on_step), ((not stage_step) if on_epoch is None else on_epoch)
    allowed_step, allowed_epoch, default_step, default_epoch = levels
    on_step = default_step if on_step is None else on_step
    on_epoch = default_epoch if on_epoch is None else on_epoch
    for name, value, allowed in (("on_step", on_step, allowed_step), ("on_epoch", on_epoch, allowed_epoch)):
        if value not in allowed:
            raise MisconfigurationException(  # Lightning's words, then how to fix it
                f"You can't `self.log({name}={value})` inside `{fx}`, must be one of {allowed}. Log it in a "
                f"batch hook (training_step, on_train_batch_end, ...) for a value per step, or leave {name} unset here"
            )
    return on_step, on_epoch
