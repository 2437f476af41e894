"""``Tuner`` (Lightning 2.6's ``tuner/tuning.py``): ``lr_find`` and ``scale_batch_size``, each as
Lightning's, one fit of the Trainer's own with a ``LearningRateFinder`` / ``BatchSizeFinder`` first
among its callbacks, which searches at the fit's start (its trials inside the fit:
``trainer/finder_runs.py``) and ends the fit; then the model's weights and the Trainer's fit state are
as before it, and with ``update_attr`` the model's ``lr`` (or ``learning_rate``) is the suggestion.

Lightning 1.x's ``trainer.tuner`` and ``trainer.tune`` (``trainer/lightning1/tuner.py``) run the same
way with 1.9.5's finder callbacks (``_lr_finder``, ``_batch_size_finder``).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from trainmesh.tuner.batch_size_scaling import BatchSizeAttribute
from trainmesh.tuner.lr_finder import _LRFinder, lr_attribute, set_lr
from trainmesh.utilities.lightning_loggers import lightning_named_logger
from trainmesh.utilities.rank_zero import rank_zero_warn

log = lightning_named_logger(__name__)  # Lightning's lines, governed as its loggers' by a program's settings


class Trainer(Protocol):
    """What the tuner reads and sets of the Trainer (a protocol, so that the Trainer's Lightning 1.x
    ``trainer.tune`` may run the Tuner without an import circle)."""

    callbacks: list[Any]

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


class Tuner:
    """Tunes a Trainer's run: ``Tuner(trainer).lr_find(model, train_dataloaders)``. On a Trainer spelled for
    Lightning 1.x (``Trainer(gpus=0)``, ``from_argparse_args``: 1.9.5 its only owner) ``Tuner(trainer)`` is
    1.9.5's, as its ``trainer.tuner`` (lightning1/tuner.py: 1.9.5's search rules and defaults)."""

    def __new__(cls, trainer: Trainer) -> Tuner:
        lightning1 = getattr(trainer, "_lightning1", None)  # (the Trainer's 1.x arguments: lightning1/one_run.py)
        if cls is Tuner and lightning1 is not None and lightning1.spelled:
            tuner: Tuner = getattr(trainer, "tuner")  # noqa: B009  # 1.9.5's Tuner of a 1.x Trainer (trainer_members.py)
            return tuner
        return super().__new__(cls)

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

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
        callback = self._lr_finder(min_lr, max_lr, num_training, mode, early_stop_threshold, attr_name)
        found: _LRFinder | None = self._search_in_fit(callback, model, train_dataloaders, val_dataloaders, datamodule)
        if found is not None and update_attr:
            _apply_suggestion(model, attr, found)
        return found

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
        callback = self._batch_size_finder(mode, steps_per_trial, init_val, max_trials, batch_arg_name, margin, max_val)
        BatchSizeAttribute(model, datamodule, batch_arg_name)  # a missing field stops before the fit
        found_size: int | None = self._search_in_fit(callback, model, None, val_dataloaders, datamodule)
        return found_size

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
