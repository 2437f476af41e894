"""pytorch-lightning 1.9.5's batch-size search, for 1.x's ``Trainer(auto_scale_batch_size=...)`` +
``trainer.tune``: its rules differ from Lightning 2's (``tuner/batch_size_scaling.py``) in what a
program sees (the size found, set on the model, and the fit trained with it):

- ``"power"`` runs ``max_trials`` trials and doubles the size after each, the last included, so it
  ends on a size one doubling past the last trial (2.x stops on the last trial's size);
- ``"binsearch"`` runs ``max_trials + 1`` trials (1.9.5's ``count > max_trials``) and keeps the size
  found (no margin);
- a new size larger than the number of batches the train loader makes at the present size is capped
  at the dataset's length (1.9.5's ``_is_valid_batch_size``; 2.x stops once the size reaches the
  length, and goes past it), and there is no ``max_val``.

The search runs inside a fit of its own, as 1.9.5's ``BatchSizeFinder`` runs it (``trainer.tuner`` and
``trainer.tune``: lightning1/tuner.py): each trial the fit's training loop again, which asks for a new
train loader as 1.9.5's fit loop does at its start; a changed size asks for one more (1.9.5's
``_reset_dataloaders``), and the size check reads the loader asked for last. On a CPU no trial runs out
of memory; the halving and bisecting after one are 1.9.5's as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from trainmesh.trainer.search_trials import SearchTrials
from trainmesh.tuner import temporary_checkpoint
from trainmesh.tuner.batch_size_scaling import BatchSizeAttribute, _is_oom
from trainmesh.tuner.progress_bar_after_search import enable_progress_bar
from trainmesh.utilities.lightning_loggers import lightning_named_logger

log = lightning_named_logger(__name__)  # 1.9.5's lines, shown as its tuner's

Length = Callable[[], "tuple[int | None, int | None]"]


def _nothing() -> None:
    pass


def adjust(
    size: BatchSizeAttribute, length: Length, *, factor: float = 1.0, value: int | None = None, desc: str = ""
) -> tuple[int, bool]:
    """1.9.5's ``_adjust_batch_size``: the new size and whether it changed; with ``desc`` ("succeeded",
    "failed": how the trial went) 1.9.5's line, before the size is capped at the dataset's length."""
    batch_size = size.get()
    new_size = value if value is not None else int(batch_size * factor)
    if desc:
        log.info(f"Batch size {batch_size} {desc}, trying batch size {new_size}")
    batches, samples = length()
    if batches is not None and new_size > batches and samples is not None:
        new_size = min(new_size, samples)
    size.set(new_size)
    return new_size, new_size != batch_size


def power_scaling(
    trial: Callable[[], None],
    size: BatchSizeAttribute,
    length: Length,
    max_trials: int,
    reset: Callable[[], None] = _nothing,
) -> int:
    """1.9.5's ``_run_power_scaling``; ``reset()`` after each size change (its ``_reset_dataloaders``)."""
    new_size, any_success = size.get(), False
    for _ in range(max_trials):
        try:
            trial()
            new_size, changed = adjust(size, length, factor=2.0, desc="succeeded")
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
    length: Length,
    max_trials: int,
    reset: Callable[[], None] = _nothing,
) -> int:
    """1.9.5's ``_run_binary_scaling``; ``reset()`` after each size change (its ``_reset_dataloaders``)."""
    new_size, low, high, count = size.get(), 1, None, 0
    while True:
        try:
            trial()
            count += 1
            if count > max_trials:
                break
            low = new_size
            if high:
                if high - low <= 1:
                    break
                new_size, changed = adjust(size, length, value=(high + low) // 2, desc="succeeded")
            else:
                new_size, changed = adjust(size, length, factor=2.0, desc="succeeded")
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
    return new_size


class _HeldLoader:
    """The train loader 1.9.5's Trainer holds during the search (``trainer.train_dataloader``): asked for by
    the first size check, by each trial's fit loop as it starts, and by each reset."""

    def __init__(self, source: Any) -> None:
        self._source, self.loader = source, cast(Any, None)

    def reset(self) -> None:
        self.loader = self._source.train_dataloader()

    def lengths(self) -> tuple[int | None, int | None]:
        """Its number of batches and of samples (None where it has no length); asked for if none is held."""
        if self.loader is None:
            self.reset()
        try:
            return len(self.loader), len(self.loader.dataset)
        except (AttributeError, TypeError, NotImplementedError):
            return None, None


def scale_batch_size(
    trials: SearchTrials,
    *,
    fit_follows: bool,  # (1.x's finders are the Tuner's only: its fit ends after the search)
    mode: str,
    steps_per_trial: int,
    init_val: int,
    max_trials: int,
    batch_arg_name: str,
) -> int:
    """1.9.5's ``scale_batch_size`` in the running fit (module docstring): the size found, set where the
    batch size lives; then the fit's state as before (its checkpoint restored), the size kept."""
    source, model = trials.fit_data.source, trials.ctx.state.module
    size = BatchSizeAttribute(model, source.datamodule, batch_arg_name)
    size.warn_if_in_both()
    path = temporary_checkpoint.saved(trials.ctx.view.default_root_dir, "scale_batch_size", says="1.9.5")
    held = _HeldLoader(source.datamodule if source.datamodule is not None else model)

    def trial() -> None:
        held.reset()  # 1.9.5's fit loop asks for its train loader as each run starts
        trials.run(held.loader, max_steps=steps_per_trial, limit_train_batches=1.0, limit_val_batches=steps_per_trial)

    adjust(size, held.lengths, value=init_val)
    search = power_scaling if mode == "power" else binsearch_scaling
    found = search(trial, size, held.lengths, max_trials, reset=held.reset)
    log.info(f"Finished batch size finder, will continue with full run using batch size {found}")
    trials.restore_loggers()  # (1.9.5 restores its params before the progress bar)
    enable_progress_bar(trials.ctx.view)
    trials.restore()
    temporary_checkpoint.restored(path, says="1.9.5")
    return found
