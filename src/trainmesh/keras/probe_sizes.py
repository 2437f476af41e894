"""A training step the step probe (step_probe.py) cannot run on its samples or on a half of them.

The probe runs the model's ``train_step`` on the first samples of the training data and on each half of
them. A model that takes one batch size only (an ``Input(batch_size=...)`` its call reshapes by, keras-io's
switch transformer: ``ops.reshape(inputs, [num_tokens_per_batch, embed_dim])``) fails on one of those runs
while the run itself, at that size per process, works. Before, the probe then checked nothing and such a
step trained on 2 x 16 other weights than Keras' fit at 32 (the switch transformer's expert capacity and
load-balancing loss couple the batch's tokens: 9.5e-3 apart, History 1.6e-2), silently.

Now the probe runs again with the sizes the run has (twice each process's batch, and that batch as each
half); where a run still fails at a size other than each process's batch, the step is refused with what
could not be checked, the step's error and what to do. A step failing at each process's own batch size is
left to the run, which meets that error itself."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from trainmesh.keras.probe_data import PROBED_SAMPLES

ERROR_CHARACTERS = 300  # the step's error, as the refusal quotes it


class StepFailed(Exception):  # noqa: N818 -- a step's failure, carried to the refusal
    """The model's ``step`` (``train_step``, ``test_step``) raised ``error`` on ``rows`` samples in one of the
    probe's runs."""

    def __init__(self, rows: int, error: BaseException, step: str = "train_step") -> None:
        super().__init__(rows, error, step)
        self.rows, self.error, self.step = rows, error, step


def rows_of(data: Any) -> int:
    from trainmesh.keras.backend import require_keras

    return len(require_keras().tree.flatten(data)[0])


def at_run_sizes(
    probed: Callable[[int], str | None], model: Any, world: int, batch_size: int | Callable[[], int | None] | None
) -> str | None:
    """``probed(PROBED_SAMPLES)`` (the step probe's reason, or None); where the step fails there, ``probed``
    at twice ``batch_size`` (each process's; a callable: read from the data then, a PyDataset's first batch);
    where it fails at another size than ``batch_size``, this module's refusal; at ``batch_size`` itself,
    None: the run meets that error itself."""
    samples, tried = PROBED_SAMPLES, []
    while True:
        try:
            return probed(samples)
        except StepFailed as failed:
            if callable(batch_size):
                batch_size = batch_size()
            if failed.rows == batch_size:
                return None
            tried.append(samples)
            if not batch_size or 2 * batch_size in tried:
                return reason(failed, model, world, batch_size, samples)
            samples = 2 * batch_size


def reason(failed: StepFailed, model: Any, world: int, batch_size: int | None, samples: int) -> str:
    """Why the run stops: what could not be checked, why, and what to do."""
    error = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", f"{type(failed.error).__name__}: {failed.error}").split())
    if len(error) > ERROR_CHARACTERS:
        error = error[: ERROR_CHARACTERS - 3] + "..."
    each = f" (each process runs it on {batch_size} samples)" if batch_size else ""
    return (
        f"trainmesh.keras cannot check that {type(model).__name__}'s training step trains under {world} processes "
        f"as on one process at the global batch{each}: its step probe runs {failed.step} on {samples} of the first "
        f"samples and on each half of them, and it failed on {failed.rows} samples ({error}). Under {world} "
        "processes each process runs the step on its part of every global batch and the gradients are averaged, "
        "which is one process's step only where its loss is a mean over the batch's samples; a step coupling the "
        "batch's samples (an expert capacity, a load-balancing loss over the batch's tokens, a batch statistic) "
        "would train other weights, silently. A model that takes one batch size only (an Input(batch_size=...), a "
        "reshape to a count fixed when the model is built) cannot be run at both sizes. Build the model for any "
        "batch size (Input without batch_size, ops.reshape with -1 for the batch), or run on one process "
        "(devices=1). If the model does take any batch size, this failure is trainmesh's: please report it"
    )
