"""Lightning 2.6's batch-size search (its ``tuner/batch_size_scaling.py``), for ``fit``: from
``init_val`` the batch size (the model's, its ``hparams``' or the data module's ``batch_arg_name``)
is doubled after each trial of ``steps_per_trial`` steps that runs (``"power"``), or, after a trial
that runs out of memory, halved (``"power"``: the search ends) or bisected (``"binsearch"``, which
keeps ``margin`` below the size found); never past the dataset's length or ``max_val``, at most
``max_trials`` trials. On a CPU nothing runs out of memory: the size doubles until a limit stops it.
The model's weights and the Trainer's fit state are as before the search.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.rank_zero import rank_zero_warn

log = lightning_named_logger(__name__)  # governed as Lightning's by a program's settings of its loggers


class BatchSizeAttribute:
    """Where the batch size lives: the model's attribute, its ``hparams``, the data module's, its
    ``hparams`` (Lightning's ``lightning_getattr``/``lightning_setattr`` holders, in their order)."""

    def __init__(self, model: Any, datamodule: Any, name: str) -> None:
        self.model, self.datamodule, self.name = model, datamodule, name
        if not self._holders():
            raise AttributeError(f"Field {name} not found in `model`, `datamodule`, nor their `hparams` attributes.")

    def _holders(self) -> list[Any]:
        holders: list[Any] = []
        for owner in (self.model, self.datamodule):
            if owner is None:
                continue
            if hasattr(owner, self.name):
                holders.append(owner)
            hparams = getattr(owner, "hparams", None)
            if hparams is not None and self.name in hparams:
                holders.append(hparams)
        return holders

    def warn_if_in_both(self) -> None:
        """Lightning's warning (its BatchSizeFinder.setup, in its words) where the model has the field and
        its ``hparams`` too: the model's is scaled."""
        name = self.name
        if hasattr(self.model, name) and name in getattr(self.model, "hparams", {}):
            rank_zero_warn(
                f"Field `model.{name}` and `model.hparams.{name}` are mutually"
                f" exclusive! `model.{name}` will be used as the initial batch size for scaling."
                " If this is not the intended behavior, please remove either one."
            )

    def get(self) -> int:
        # The last holder's, as Lightning's lightning_getattr (the data module's hparams before the model's)
        holder = self._holders()[-1]
        return int(holder[self.name] if isinstance(holder, dict) else getattr(holder, self.name))

    def set(self, value: int) -> None:
        # Everywhere it is (Lightning's lightning_setattr)
        for holder in self._holders():
            if isinstance(holder, dict):
                holder[self.name] = value
            else:
                setattr(holder, self.name, value)


def _is_oom(error: BaseException) -> bool:
    return isinstance(error, RuntimeError) and "out of memory" in str(error)


def adjust(
    size: BatchSizeAttribute,
    dataset_length: Callable[[], int | None],
    *,
    factor: float = 1.0,
    value: int | None = None,
    max_val: int = 8192,
    desc: str | None = None,
) -> tuple[int, bool]:
    """Lightning's ``_adjust_batch_size``: the new size (not past ``max_val``), and whether it changed;
    unchanged once the size reaches the dataset's length. With ``desc`` ("succeeded", "failed": how the
    trial went) it logs Lightning's line for the step."""
    batch_size = size.get()
    length = dataset_length()
    if length is not None and batch_size >= length:
        log.info(f"The batch size {batch_size} is greater or equal than the length of your dataset: {length}.")
        return batch_size, False
    new_size = value if value is not None else int(batch_size * factor)
    if new_size > max_val:
        if desc:
            log.info(f"Batch size {new_size} exceeds max_val limit {max_val}, capping at {max_val}")
        new_size = max_val
    if desc:
        log.info(f"Batch size {batch_size} {desc}, trying batch size {new_size}")
    size.set(new_size)
    return new_size, new_size != batch_size


def _nothing() -> None:
    pass


def power_scaling(
    trial: Callable[[], None],
    size: BatchSizeAttribute,
    length: Callable[[], int | None],
    max_trials: int,
    max_val: int,
    reset: Callable[[], None] = _nothing,
) -> int:
    """Lightning's ``_run_power_scaling``; ``reset()`` after each size change (its ``_reset_dataloaders``)."""
    new_size, any_success = size.get(), False
    for i in range(max_trials):
        if new_size >= max_val:
            log.info(f"Reached the maximum batch size limit of {max_val}. Stopping search.")
            break
        try:
            trial()
            if i + 1 >= max_trials:
                break
            new_size, changed = adjust(size, length, factor=2.0, max_val=max_val, desc="succeeded")
            if not changed:
                break
            reset()
            any_success = True
        except RuntimeError as error:
            if not _is_oom(error):
                raise
            new_size, _ = adjust(size, length, factor=0.5, desc="failed")
            reset()
            if any_success:
                break
    return new_size


def binsearch_scaling(
    trial: Callable[[], None],
    size: BatchSizeAttribute,
    length: Callable[[], int | None],
    max_trials: int,
    margin: float,
    max_val: int,
    reset: Callable[[], None] = _nothing,
) -> int:
    """Lightning's ``_run_binsearch_scaling``; ``reset()`` after each size change (its ``_reset_dataloaders``)."""
    new_size, low, high, count = size.get(), 1, None, 0
    while True:
        if new_size >= max_val:
            log.info(f"Reached the maximum batch size limit of {max_val}. Stopping search.")
            break
        try:
            trial()
            count += 1
            if count >= max_trials:
                break
            low = new_size
            if high and high - low <= 1:
                break
            target = {"value": (high + low) // 2} if high else {"factor": 2.0}
            new_size, changed = adjust(size, length, max_val=max_val, desc="succeeded", **target)  # type: ignore[arg-type]
            if not changed:
                break
            reset()
        except RuntimeError as error:
            if not _is_oom(error):
                raise
            high = new_size
            new_size, _ = adjust(size, length, value=(high + low) // 2, desc="failed")
            reset()
            if high - low <= 1:
                break
    if margin > 0 and max(1, int(new_size * (1 - margin))) != new_size:
        reduced = max(1, int(new_size * (1 - margin)))
        log.info(f"Applying margin of {margin:.1%}, reducing batch size from {new_size} to {reduced}")
        new_size = reduced
        size.set(new_size)
    return new_size
