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

On a CPU no trial runs out of memory; the halving and bisecting after one are 1.9.5's as well.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from trainmesh.trainer.data_source import DataSource
from trainmesh.trainer_view import TrainerView
from trainmesh.tuner.batch_size_scaling import BatchSizeAttribute, _is_oom
from trainmesh.tuner.tuning import Tuner
from trainmesh.utilities.lightning_loggers import lightning_named_logger

log = lightning_named_logger(__name__)  # 1.9.5's lines, shown as its tuner's

Length = Callable[[], "tuple[int | None, int | None]"]


def _nothing(**_: Any) -> None:
    pass


def loader_lengths(source: Any) -> tuple[int | None, int | None]:
    """The number of batches and of samples of the train loader the model or data module makes now
    (None where it has no length)."""
    loader = source.train_dataloader()
    try:
        return len(loader), len(loader.dataset)
    except (AttributeError, TypeError, NotImplementedError):
        return None, None


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


def power_scaling(trial: Callable[[], None], size: BatchSizeAttribute, length: Length, max_trials: int) -> int:
    """1.9.5's ``_run_power_scaling``."""
    new_size, any_success = size.get(), False
    for _ in range(max_trials):
        try:
            trial()
            new_size, changed = adjust(size, length, factor=2.0, desc="succeeded")
            if not changed:
                break
            any_success = True
        except RuntimeError as error:
            if not _is_oom(error):
                raise
            new_size, _ = adjust(size, length, factor=0.5, desc="failed")
            if any_success:
                break
    return new_size


def binsearch_scaling(trial: Callable[[], None], size: BatchSizeAttribute, length: Length, max_trials: int) -> int:
    """1.9.5's ``_run_binary_scaling``."""
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
        except RuntimeError as error:
            if not _is_oom(error):
                raise
            high = new_size
            new_size, _ = adjust(size, length, value=(high + low) // 2, desc="failed")
            if high - low <= 1:
                break
    return new_size


def _set_up_as_its_fit(trainer: TrainerView, model: Any, datamodule: Any) -> None:
    """1.9.5's search runs inside a fit (its ``BatchSizeFinder.on_fit_start``): ``prepare_data`` and the
    ``setup("fit")`` hooks (the data module's, the callbacks', the module's) have run when it first asks
    for the train loader, so a loader made from a dataset that ``setup`` builds has its length then."""
    model.trainer = trainer  # as each fit attaches it: a setup may read self.trainer
    DataSource(datamodule=datamodule, model=model, trainer_fn="fit").prepare(trainer, "fit")
    for callback in trainer.callbacks:
        callback.setup(trainer, model, stage="fit")
    model.setup(stage="fit")


class LightningOneTuner(Tuner):
    """trainmesh's ``Tuner`` with 1.9.5's batch-size search (module docstring); ``margin`` and ``max_val``
    (2.x's) do not exist in it."""

    _says_checkpoint = "1.9.5"  # its lines about the temporary checkpoint (restored, not the weights_only line)
    _in_one_fit = False  # 1.9.5's trials: each a fit

    def _batch_size_rules(
        self, mode: str, max_trials: int, margin: float, max_val: int
    ) -> tuple[Callable[..., int], Callable[..., tuple[int, bool]]]:
        search = power_scaling if mode == "power" else binsearch_scaling

        def run(trial: Callable[[], None], size: BatchSizeAttribute, length: Length) -> int:
            return search(trial, size, length, max_trials)

        return run, adjust

    def _trial_data(
        self, model: Any, source: Any, val_dataloaders: Any, datamodule: Any
    ) -> tuple[Callable[[], None], Callable[[], Any], dict[str, Any], Callable[..., Any]]:
        """1.9.5's: each trial a fit asking for its own loaders, each size check asking for a new one, and
        nothing after the search (its ``__scale_batch_restore_params`` leaves the loaders as the last trial
        left them)."""
        trainer = self._trainer
        _set_up_as_its_fit(cast(TrainerView, trainer), model, datamodule)  # the Trainer (the protocol is its part)

        def trial() -> None:
            trainer._reset_fit_state()  # each trial from step 0, as 1.9.5's _reset_progress
            trainer.fit(model, val_dataloaders=val_dataloaders, datamodule=datamodule)

        return trial, functools.partial(loader_lengths, source), {}, _nothing
