"""The info lines Lightning's Trainer logs about its batch limits as it is built (its
``_init_debugging_flags`` and ``_determine_batch_limits``): a limit given as exactly ``1`` or
``1.0`` is said out loud, because an int and a float of the same value mean one batch and every
batch; ``fast_dev_run`` says what it runs. Only values the program gave are said (Lightning's
defaults are None), in Lightning's order: ``overfit_batches``, then ``fast_dev_run`` or the limits."""

from __future__ import annotations

from typing import Any

from trainmesh.utilities.rank_zero import rank_zero_info

# The Trainer's arguments this reads (its locals, as the Trainer hands them over)
BATCH_LIMIT_ARGUMENTS = frozenset(
    {
        "overfit_batches",
        "fast_dev_run",
        "limit_train_batches",
        "limit_val_batches",
        "limit_test_batches",
        "limit_predict_batches",
        "val_check_interval",
    }
)

_ONE_BATCH = {
    "limit_train_batches": "1 batch per epoch will be used.",
    "val_check_interval": "validation will run after every batch.",
}
# Lightning's text ends these with "..": a full stop in the message and one after it
_EVERY_BATCH = {
    "limit_train_batches": "100% of the batches per epoch will be used.",
    "val_check_interval": "validation will run at the end of the training epoch.",
}


def announce_batch_limits(**given: Any) -> None:
    """Lightning's lines for the Trainer's ``given`` arguments (BATCH_LIMIT_ARGUMENTS)."""
    overfit = given["overfit_batches"]
    _say("overfit_batches", overfit)
    overfitting = overfit > 0
    dev_run = given["fast_dev_run"]
    if dev_run:
        rank_zero_info(
            f"Running in `fast_dev_run` mode: will run the requested loop using {int(dev_run)} batch(es). "
            "Logging and checkpointing is suppressed."
        )
        return
    names = ["limit_test_batches", "limit_predict_batches", "val_check_interval"]
    for name in names if overfitting else ["limit_train_batches", "limit_val_batches", *names]:
        _say(name, given[name])


def _say(name: str, value: Any) -> None:
    if isinstance(value, int) and value == 1:
        rank_zero_info(f"`Trainer({name}=1)` was configured so {_ONE_BATCH.get(name, '1 batch will be used.')}")
    elif isinstance(value, float) and value == 1.0:
        rank_zero_info(
            f"`Trainer({name}=1.0)` was configured so {_EVERY_BATCH.get(name, '100% of the batches will be used.')}."
        )
