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
