"""The info lines Lightning 2.6's ``Trainer()`` logs for its debugging flags (``_init_debugging_flags``
and ``_determine_batch_limits``), in its words and order, after the "GPU available" lines: a batch
limit given as the int 1 or the float 1.0 (which reads as one batch and which as all of them), and
``fast_dev_run``'s notice (a float's line ends in Lightning's "..", as a program reading it
sees). A limit left at its default (None) says nothing, as in Lightning.

>>> batch_limit_notes({"limit_val_batches": 1, "limit_test_batches": 1.0, "overfit_batches": 0.0})
['`Trainer(limit_val_batches=1)` was configured so 1 batch will be used.', '`Trainer(limit_test_batches=1.0)` was configured so 100% of the batches will be used..']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainmesh.utilities.rank_zero import rank_zero_info

_ONE = {
    "limit_train_batches": ("1 batch per epoch will be used.", "100% of the batches per epoch will be used."),
    "val_check_interval": (
        "validation will run after every batch.",
        "validation will run at the end of the training epoch.",
    ),
}
_DEFAULT = ("1 batch will be used.", "100% of the batches will be used.")


def _note(name: str, value: Any) -> str | None:
    one, all_of_them = _ONE.get(name, _DEFAULT)
    if isinstance(value, int) and not isinstance(value, bool) and value == 1:
        return f"`Trainer({name}=1)` was configured so {one}"
    if isinstance(value, float) and value == 1.0:
        return f"`Trainer({name}=1.0)` was configured so {all_of_them}."  # Lightning's "..", kept
    return None


def batch_limit_notes(given: Mapping[str, Any]) -> list[str]:
    """Lightning's lines for the Trainer arguments ``given`` (the names as in ``Trainer()``, values as
    passed), in its order: overfit_batches, then fast_dev_run's notice or the limits (train and val
    only where overfit_batches is off) and val_check_interval."""
    overfit = given.get("overfit_batches", 0.0)
    names = ["overfit_batches"]
    dev_run = given.get("fast_dev_run", False)
    if dev_run:
        names += ["fast_dev_run"]
    else:
        names += [] if overfit else ["limit_train_batches", "limit_val_batches"]
        names += ["limit_test_batches", "limit_predict_batches", "val_check_interval"]
    notes = []
    for name in names:
        if name == "fast_dev_run":
            notes.append(
                f"Running in `fast_dev_run` mode: will run the requested loop using {int(dev_run)} batch(es). "
                "Logging and checkpointing is suppressed."
            )
        elif (note := _note(name, given.get(name))) is not None:
            notes.append(note)
    return notes


def say_batch_limit_notes(notes: list[str]) -> None:
    """Log the lines at INFO on rank 0, as Lightning's ``rank_zero_info``."""
    for note in notes:
        rank_zero_info(note)
