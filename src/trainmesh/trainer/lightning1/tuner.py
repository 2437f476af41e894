"""pytorch-lightning 1.9.5's ``Tuner``: a 1.x run's ``trainer.tuner`` and the searches of its
``trainer.tune``. As 1.9.5's (and Lightning 2's), each search runs in a fit of the Trainer's own whose
finder callback, first among the callbacks, searches at the fit's start and ends the fit (``setup``
and ``configure_optimizers`` once, the trials inside, the fit's state saved before them and restored
after: ``on_save_checkpoint`` / ``on_load_checkpoint``; no ``on_fit_start``, ``on_fit_end``); what
differs from 2.x is 1.9.5's:

- ``scale_batch_size`` has no ``margin`` / ``max_val`` and searches by 1.9.5's rules
  (``batch_size_search.py``: ``max_trials=2`` from 2 ends on 8, where 2.x's ends on 4);
- ``lr_find`` defaults to ``update_attr=False``, takes the attribute ``Trainer(auto_lr_find="name")``
  names, and suggests by 1.9.5's rule (``LightningOneLRFinder``); the fit loop's train loader is not
  asked for again after the search.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from trainmesh.callbacks.finders import UPDATE_ATTR_DEFAULT, BatchSizeFinder, LearningRateFinder
from trainmesh.trainer.lightning1 import batch_size_search
from trainmesh.trainer.search_trials import SearchTrials
from trainmesh.trainer_view import TrainerView
from trainmesh.tuner.in_fit_searches import range_test
from trainmesh.tuner.lr_finder import _LRFinder, lr_attribute, set_lr
from trainmesh.tuner.tuning import Tuner
from trainmesh.utilities.lightning_loggers import lightning_named_logger

log = lightning_named_logger("trainmesh.tuner.lr_finder")  # 1.9.5's lines, shown as its tuner's


class LightningOneLRFinder(_LRFinder):
    """The finder 1.x's ``lr_find`` returns, with pytorch-lightning 1.9.5's ``suggestion``: the steepest
    fall of the loss from one search step to the next (2.x's: over the learning rates, a different
    point), its index counted from ``skip_begin`` among the finite losses, as 1.9.5 counts it."""

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The learning rate 1.9.5 suggests (None with too few points)."""
        losses = torch.tensor(self.results["loss"][skip_begin:-skip_end], dtype=torch.float64)
        losses = losses[torch.isfinite(losses)]
        if len(losses) < 2:
            log.error(
                "Failed to compute suggestion for learning rate because there are not enough points. Increase the loop"
                " iteration limits or the size of your dataset/dataloader."
            )
            self._optimal_idx = None
            return None
        self._optimal_idx = int(torch.argmin(torch.gradient(losses)[0]).item()) + skip_begin
        return float(self.results["lr"][self._optimal_idx])


def _lr_search(
    trials: SearchTrials,
    *,
    fit_follows: bool,  # (1.x's finders are the Tuner's only: its fit ends after the search)
    attr: str,
    **settings: Any,
) -> LightningOneLRFinder:
    """1.9.5's ``lr_find`` in the running fit: the range test, then with ``attr`` its suggestion written there."""
    found = range_test(trials, says="1.9.5", **settings)
    finder = LightningOneLRFinder(found.mode, found.lr_min, found.lr_max, found.num_training)
    finder.results = found.results
    if attr and (lr := finder.suggestion()) is not None:
        set_lr(trials.ctx.state.module, attr, lr)
        log.info(f"Learning rate set to {lr}")
    return finder


class LightningOneLearningRateFinder(LearningRateFinder):
    """The finder callback of 1.x's ``trainer.tuner.lr_find``: 1.9.5's search (``_lr_search``), which
    writes the suggestion itself (1.9.5's callback has no ``on_fit_start`` after it)."""

    in_fit_search = staticmethod(_lr_search)

    def search_arguments(self, pl_module: Any) -> dict[str, Any]:
        arguments = super().search_arguments(pl_module)
        del arguments["update_attr"]
        return arguments | {"attr": lr_attribute(pl_module, self._attr_name) if self._update_attr else ""}

    def on_fit_start(self, trainer: TrainerView, pl_module: Any) -> None:
        pass  # (the suggestion was written as the search ended)


class LightningOneBatchSizeFinder(BatchSizeFinder):
    """The finder callback of 1.x's ``trainer.tuner.scale_batch_size``: 1.9.5's search
    (``batch_size_search.scale_batch_size``), with no ``margin`` / ``max_val``."""

    in_fit_search = staticmethod(batch_size_search.scale_batch_size)

    def search_arguments(self, pl_module: Any) -> dict[str, Any]:
        arguments = super().search_arguments(pl_module)
        del arguments["margin"], arguments["max_val"]
        return arguments


def lightning_one_finder(finder: Any, auto_lr_find: bool | str) -> Any:
    """The 1.9.5 finder that searches for a program's ``LearningRateFinder`` / ``BatchSizeFinder`` in a 1.x
    run (1.9.5's callbacks: its search rules; ``update_attr`` left at its default is 1.9.5's ``False``, the
    attribute ``auto_lr_find`` names its 1.9.5's); the program's own finder receives the result."""
    if isinstance(finder, (LightningOneLearningRateFinder, LightningOneBatchSizeFinder)):
        return finder  # (the 1.x Tuner's own)
    if isinstance(finder, LearningRateFinder):
        update_attr = False if finder._update_attr is UPDATE_ATTR_DEFAULT else bool(finder._update_attr)
        attr_name = finder._attr_name or (auto_lr_find if isinstance(auto_lr_find, str) else "")
        rates = (finder._min_lr, finder._max_lr, finder._num_training_steps, finder._mode)
        return LightningOneLearningRateFinder(*rates, finder._early_stop_threshold, update_attr, attr_name)
    if (finder._margin, finder._max_val) != (0.05, 8192):
        raise ValueError(
            f"BatchSizeFinder(margin={finder._margin}, max_val={finder._max_val}) in a run written for "
            "pytorch-lightning 1.x is not supported: 1.9.5's BatchSizeFinder has no margin or max_val, and this "
            "run follows its search; leave both at their defaults, or write the run for Lightning 2 (no 1.x-only "
            "Trainer arguments or hooks)"
        )
    sizes = (finder._mode, finder._steps_per_trial, finder._init_val, finder._max_trials, finder._batch_arg_name)
    return LightningOneBatchSizeFinder(*sizes)


class LightningOneTuner(Tuner):
    """``trainer.tuner`` of a 1.x run: 1.9.5's ``scale_batch_size`` and ``lr_find`` (module docstring).

    Examples:
        >>> import trainmesh as tm
        >>> tm.Trainer(auto_lr_find=True, logger=False).tuner.lr_find  # doctest: +ELLIPSIS
        <bound method LightningOneTuner.lr_find of ...>
    """

    _update_attr = False  # the present lr_find's (1.9.5's callback writes the suggestion)

    def scale_batch_size(  # type: ignore[override]  # 1.9.5's arguments: no margin, no max_val
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
    ) -> int | None:
        """1.9.5's batch-size search: the size found, also set where the batch size lives (None under
        ``fast_dev_run``)."""
        data = (train_dataloaders, val_dataloaders, dataloaders, datamodule, method)
        return super().scale_batch_size(model, *data, mode, steps_per_trial, init_val, max_trials, batch_arg_name)

    def lr_find(  # type: ignore[override]  # 1.9.5's arguments: update_attr False, no attr_name
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
        update_attr: bool = False,
    ) -> LightningOneLRFinder | None:
        """1.9.5's range test (``.results``, its ``.suggestion()``); with ``update_attr`` the suggestion goes
        to the model's ``lr`` / ``learning_rate`` (or the attribute ``auto_lr_find`` names). None under
        ``fast_dev_run``."""
        named = getattr(self._trainer, "auto_lr_find", False)  # 1.9.5's _determine_lr_attr_name reads it
        data = (train_dataloaders, val_dataloaders, dataloaders, datamodule, method)
        self._update_attr = update_attr
        try:
            found = super().lr_find(
                model,
                *data,
                min_lr,
                max_lr,
                num_training,
                mode,
                early_stop_threshold,
                False,
                named if isinstance(named, str) else "",
            )
        finally:
            self._update_attr = False
        assert found is None or isinstance(found, LightningOneLRFinder)
        return found

    def _lr_finder(self, *settings: Any) -> Any:
        min_lr, max_lr, num_training, mode, early_stop_threshold, attr_name = settings
        arguments = (min_lr, max_lr, num_training, mode, early_stop_threshold, self._update_attr, attr_name)
        return LightningOneLearningRateFinder(*arguments)

    def _batch_size_finder(self, *settings: Any) -> Any:
        return LightningOneBatchSizeFinder(*settings[:5])  # (not margin, max_val)
