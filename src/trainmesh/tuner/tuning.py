"""``Tuner`` (Lightning 2.6's ``tuner/tuning.py``): ``lr_find`` and ``scale_batch_size``, each as
Lightning's, one fit of the Trainer's own with a ``LearningRateFinder`` / ``BatchSizeFinder`` first
among its callbacks, which searches at the fit's start (its trials inside the fit:
``trainer/finder_runs.py``) and ends the fit; then the model's weights and the Trainer's fit state are
as before it, and with ``update_attr`` the model's ``lr`` (or ``learning_rate``) is the suggestion.

Lightning 1.x's ``trainer.tune`` (``trainer/lightning1/batch_size_search.py``) runs 1.9.5's trials
instead, each a short fit of its own (``_in_one_fit = False``: the older path below).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any, Literal, Protocol

from trainmesh.seed import isolate_rng
from trainmesh.tuner import temporary_checkpoint
from trainmesh.tuner.batch_size_scaling import BatchSizeAttribute, adjust, binsearch_scaling, power_scaling
from trainmesh.tuner.lr_finder import _ExchangeScheduler, _LRCallback, _LRFinder, lr_attribute, set_lr
from trainmesh.tuner.progress_bar_after_search import enable_progress_bar
from trainmesh.tuner.run_callbacks_setup import RunCallbacksSetup
from trainmesh.tuner.trial_loaders import TrialLoaders
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.rank_zero import rank_zero_warn

log = lightning_named_logger(__name__)  # Lightning's lines, governed as its loggers' by a program's settings


class Trainer(Protocol):
    """What the tuner reads and sets of the Trainer (a protocol, so that the Trainer's Lightning 1.x
    ``trainer.tune`` may run the Tuner without an import circle)."""

    callbacks: list[Any]
    loggers: list[Any]
    default_root_dir: str
    progress_bar_callback: Any  # (read only: enabled after a search, progress_bar_after_search.py)
    max_steps: int
    limit_train_batches: int | float
    limit_val_batches: int | float
    num_sanity_val_steps: int | float

    @property
    def global_step(self) -> int: ...
    @property
    def fast_dev_run(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def num_devices(self) -> int: ...
    @property
    def num_nodes(self) -> int: ...
    def fit(
        self, model: Any, train_dataloaders: Any = None, val_dataloaders: Any = None, datamodule: Any = None
    ) -> None: ...
    def _reset_fit_state(self, *, keep_metrics: bool = False) -> None: ...
    def _fit_on_train_loader(self, model: Any, train_loader: Any, val_dataloaders: Any, datamodule: Any) -> None: ...


class Tuner:
    """Tunes a Trainer's run: ``Tuner(trainer).lr_find(model, train_dataloaders)``."""

    _says_checkpoint = "2.6"  # whose lines about the temporary checkpoint (temporary_checkpoint.py)
    # Lightning 2.6's: the search inside one fit (trainer/finder_runs.py); Lightning 1.x's trainer.tune
    # (trainer/lightning1/batch_size_search.py) runs 1.9.5's trials, each a fit of its own
    _in_one_fit = True

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer
        # A BatchSizeFinder's search in a fit (trainer/finder_runs.py): the train loader the search
        # ends with, which the fit reads, as Lightning's fit reads the loader its search left
        self._fit_follows = False
        self.fit_train_loader: Any = None

    def lr_find(
        self,
        model: Any,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        method: Literal["fit", "validate", "test", "predict"] = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> _LRFinder | None:
        """The range test's results (``.results``, ``.suggestion()``); None under ``fast_dev_run``."""
        if method != "fit":
            raise ValueError("method='fit' is the only valid configuration to run lr finder.")
        if dataloaders is not None:
            raise ValueError("In tuner with method='fit', `dataloaders` argument should be None.")
        trainer = self._trainer
        _refuse_a_configured_finder(trainer, "LearningRateFinder")
        if trainer.fast_dev_run:
            rank_zero_warn("Skipping learning rate finder since `fast_dev_run` is enabled.")
            return None
        attr = lr_attribute(model, attr_name) if update_attr else ""
        if self._in_one_fit:
            callback = self._lr_finder(min_lr, max_lr, num_training, mode, early_stop_threshold, attr_name)
            data = (train_dataloaders, val_dataloaders, datamodule)
            found: _LRFinder | None = self._search_in_fit(callback, model, *data)
            if found is not None and update_attr:
                _apply_suggestion(model, attr, found)
            return found
        finder = _LRFinder(mode, min_lr, max_lr, num_training)
        recorder = _LRCallback(num_training, early_stop_threshold)
        # Lightning's LearningRateFinder runs the search under isolate_rng: the generators (torch's,
        # numpy's, Python's) are after it as before, so the fit that follows shuffles as without it
        with isolate_rng():
            self._lr_search_fit(model, (train_dataloaders, val_dataloaders, datamodule), finder, recorder)
            enable_progress_bar(trainer)  # (after a search that ended; 1.9.5's calls it before its restore)
            if train_dataloaders is None:
                # Lightning's _lr_find resets the fit loop's data after its restore: train_dataloader() asked
                # once more, here under isolate_rng as there; a fit with the LearningRateFinder reads it
                loader = (datamodule if datamodule is not None else model).train_dataloader()
                self.fit_train_loader = loader if self._fit_follows else None
            if update_attr:
                _apply_suggestion(model, attr, finder)
        return finder

    def _lr_search_fit(self, model: Any, data: tuple[Any, ...], finder: _LRFinder, recorder: _LRCallback) -> None:
        """1.9.5's search: a fit of its own with the search's callbacks in place of the run's, then the run's
        settings, weights and checkpoint back (its ``__lr_finder_restore_params`` and restore)."""
        trainer, num_training = self._trainer, finder.num_training
        checkpoint = temporary_checkpoint.saved(trainer.default_root_dir, "lr_find", says=self._says_checkpoint)
        weights = copy.deepcopy(model.state_dict())
        kept = {
            "callbacks": trainer.callbacks,
            "loggers": trainer.loggers,
            "max_steps": trainer.max_steps,
            "limit_val_batches": trainer.limit_val_batches,
            "num_sanity_val_steps": trainer.num_sanity_val_steps,
        }
        try:
            # (the run's callbacks get setup/teardown around the search, as in 1.9.5's _run of its own)
            trainer.callbacks = [RunCallbacksSetup(trainer.callbacks), _ExchangeScheduler(finder), recorder]
            trainer.loggers = []
            trainer.max_steps, trainer.limit_val_batches = num_training + trainer.global_step, num_training
            trainer.num_sanity_val_steps = 0  # Lightning's search runs the fit loop alone
            start = trainer.global_step
            trainer.fit(model, *data)
            finder.results = {"lr": recorder.lrs, "loss": recorder.losses}
            if trainer.global_step != num_training + start:  # Lightning's line
                log.info(f"LR finder stopped early after {trainer.global_step} steps due to diverging loss.")
        finally:
            for name, value in kept.items():
                setattr(trainer, name, value)
            model.load_state_dict(weights)
            trainer._reset_fit_state(keep_metrics=True)  # fit anew at step 0; 1.9.5's tune keeps the metrics
            temporary_checkpoint.restored(checkpoint, says=self._says_checkpoint)

    def scale_batch_size(
        self,
        model: Any,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: Any = None,
        method: Literal["fit", "validate", "test", "predict"] = "fit",
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int = 8192,
    ) -> int | None:
        """The largest batch size found (``"power"`` or ``"binsearch"``), also set where the batch
        size lives; None under ``fast_dev_run``. Only for ``fit``, on one process."""
        trainer = self._trainer
        if method != "fit" or mode not in ("power", "binsearch"):
            raise ValueError(
                f"method={method!r}, mode={mode!r}: trainmesh searches for fit only, in mode 'power' or 'binsearch'"
            )
        _refuse_a_configured_finder(trainer, "BatchSizeFinder")
        if train_dataloaders is not None or dataloaders is not None:
            raise ValueError(
                "The batch size finder cannot change the batch size of a loader passed in: define train_dataloader() "
                "(reading the batch size) on the model or a data module."
            )
        if trainer.world_size > 1 or trainer.num_devices * trainer.num_nodes > 1:  # launched, or to be
            raise ValueError("Tuning the batch size is currently not supported with distributed strategies.")
        if trainer.fast_dev_run:
            rank_zero_warn("Skipping batch size scaler since `fast_dev_run` is enabled.")
            return None
        if self._in_one_fit:
            callback = self._batch_size_finder(
                mode, steps_per_trial, init_val, max_trials, batch_arg_name, margin, max_val
            )
            BatchSizeAttribute(model, datamodule, batch_arg_name)  # a missing field stops before the fit
            found_size: int | None = self._search_in_fit(callback, model, None, val_dataloaders, datamodule)
            return found_size
        search, first_adjust = self._batch_size_rules(mode, max_trials, margin, max_val)
        size = BatchSizeAttribute(model, datamodule, batch_arg_name)
        size.warn_if_in_both()
        source = datamodule if datamodule is not None else model
        trial, length, search_arguments, finish = self._trial_data(model, source, val_dataloaders, datamodule)
        checkpoint = temporary_checkpoint.saved(
            trainer.default_root_dir, "scale_batch_size", says=self._says_checkpoint
        )
        weights = copy.deepcopy(model.state_dict())
        kept = {name: getattr(trainer, name) for name in ("callbacks", "loggers", "max_steps", "limit_train_batches")}
        kept |= {"limit_val_batches": trainer.limit_val_batches, "num_sanity_val_steps": trainer.num_sanity_val_steps}
        try:
            trainer.callbacks, trainer.loggers = [], []
            trainer.max_steps, trainer.limit_train_batches = steps_per_trial, 1.0
            trainer.limit_val_batches, trainer.num_sanity_val_steps = steps_per_trial, 0
            first_adjust(size, length, value=init_val)
            found = search(trial, size, length, **search_arguments)
            log.info(f"Finished batch size finder, will continue with full run using batch size {found}")
        finally:
            for name, value in kept.items():
                setattr(trainer, name, value)
            model.load_state_dict(weights)
            trainer._reset_fit_state(keep_metrics=True)  # the last trial's metrics stay, as 1.9.5's (1.x path)
            temporary_checkpoint.restored(checkpoint, says=self._says_checkpoint)
        enable_progress_bar(trainer)
        self.fit_train_loader = finish(fit_follows=self._fit_follows)
        return found

    def _lr_finder(self, *settings: Any) -> Any:
        """The callback whose fit searches the learning rate (Lightning 2.6's ``LearningRateFinder``, the
        suggestion applied by the Tuner; Lightning 1.x's ``trainer.tuner`` has 1.9.5's: lightning1/tuner.py)."""
        from trainmesh.callbacks.finders import LearningRateFinder

        min_lr, max_lr, num_training, mode, early_stop_threshold, attr_name = settings
        return LearningRateFinder(min_lr, max_lr, num_training, mode, early_stop_threshold, False, attr_name)

    def _batch_size_finder(self, *settings: Any) -> Any:
        """The callback whose fit searches the batch size (Lightning 2.6's ``BatchSizeFinder``; Lightning 1.x's
        ``trainer.tuner`` has 1.9.5's: lightning1/tuner.py)."""
        from trainmesh.callbacks.finders import BatchSizeFinder

        return BatchSizeFinder(*settings)

    def _search_in_fit(self, callback: Any, model: Any, train: Any, val: Any, datamodule: Any) -> Any:
        """Lightning's Tuner: a fit with ``callback`` first among the callbacks, which searches at the fit's
        start and ends it (``trainer/finder_runs.py``); the callback's result."""
        trainer = self._trainer
        callback._early_exit = True  # our own callback: Lightning's flag
        trainer.callbacks = [callback, *trainer.callbacks]
        try:
            trainer.fit(model, train, val, datamodule)
        finally:
            trainer.callbacks = [cb for cb in trainer.callbacks if cb is not callback]
        return callback.optimal_batch_size if hasattr(callback, "optimal_batch_size") else callback.optimal_lr

    def _trial_data(
        self, model: Any, source: Any, val_dataloaders: Any, datamodule: Any
    ) -> tuple[Callable[[], None], Callable[[], int | None], dict[str, Any], Callable[..., Any]]:
        """The search's ``trial()``, ``length()`` (the train dataset's), the search's further arguments and
        what runs after it: Lightning 2.6's loaders, asked for when its loop asks (``trial_loaders.py``);
        Lightning 1.x's ``trainer.tune`` has 1.9.5's (``trainer/lightning1/batch_size_search.py``)."""
        trainer = self._trainer

        def fit_on(loader: Any) -> None:
            trainer._reset_fit_state()  # each trial from step 0, as Lightning's _reset_progress
            trainer._fit_on_train_loader(model, loader, val_dataloaders, datamodule)

        loaders = TrialLoaders(source, fit_on)
        return loaders.trial, loaders.dataset_length, {"reset": loaders.reset}, loaders.finish

    def _batch_size_rules(
        self, mode: str, max_trials: int, margin: float, max_val: int
    ) -> tuple[Callable[..., int], Callable[..., tuple[int, bool]]]:
        """The search ``search(trial, size, length, ...)`` and the size rule the first size goes through
        (``adjust(size, length, value=init_val)``): Lightning 2.6's here; Lightning 1.x's ``trainer.tune``
        has 1.9.5's (``trainer/lightning1/batch_size_search.py``)."""
        if mode == "power":
            return functools.partial(power_scaling, max_trials=max_trials, max_val=max_val), adjust
        search = functools.partial(binsearch_scaling, max_trials=max_trials, margin=margin, max_val=max_val)
        return search, adjust


def _apply_suggestion(model: Any, attr: str, finder: _LRFinder) -> None:
    """The suggestion written to the model's ``attr`` (Lightning's ``update_attr``), said as Lightning says it."""
    lr = finder.suggestion()
    if lr is not None:
        set_lr(model, attr, lr)
        log.info(f"Learning rate set to {lr}")


def _refuse_a_configured_finder(trainer: Trainer, name: str) -> None:
    """Lightning's check (its ``_check_lr_find_configuration`` / ``_check_scale_batch_size_configuration``),
    before the model's fields are looked at: a Trainer given the finder callback searches in its fit
    already, and the Tuner would search again."""
    from trainmesh.callbacks import finders

    if any(isinstance(callback, getattr(finders, name)) for callback in trainer.callbacks):
        raise ValueError(
            f"Trainer is already configured with a `{name}` callback.Please remove it if you want to use the Tuner."
        )
