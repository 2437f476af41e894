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


# The hooks whose values Lightning logs once per epoch only (its _FxValidator allows on_step False and
# on_epoch True there, 2.6.6 and 1.9.5 alike; 1.x's *_epoch_end(outputs) hooks too)
EPOCH_ONLY = frozenset(
    {
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
    }
)


def check_levels(fx: str, on_step: bool | None, on_epoch: bool | None) -> None:
    """Raise Lightning's error for ``self.log(on_step=True)`` or ``self.log(on_epoch=False)`` in a hook
    of :data:`EPOCH_ONLY` (``fx``: the hook running), where Lightning has no step to log the value at.

    >>> check_levels("on_train_epoch_start", None, None)
    >>> check_levels("on_train_epoch_start", True, True)
    Traceback (most recent call last):
    ...
    trainmesh.utilities.exceptions.MisconfigurationException: You can't `self.log(on_step=True)` inside `on_train_epoch_start`, must be one of (False,). Log it in a batch hook (training_step, on_train_batch_end, ...) for a value per step, or leave on_step unset here
    """
    if fx not in EPOCH_ONLY:
        return
    for name, value, allowed in (("on_step", on_step, False), ("on_epoch", on_epoch, True)):
        if value is not None and value != allowed:
            raise MisconfigurationException(
                f"You can't `self.log({name}={value})` inside `{fx}`, must be one of ({allowed},). Log it in a "
                f"batch hook (training_step, on_train_batch_end, ...) for a value per step, or leave {name} unset here"
            )
