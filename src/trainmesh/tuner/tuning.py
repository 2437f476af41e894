"""``Tuner`` (Lightning 2.6's ``tuner/tuning.py``): ``lr_find``, run as a short fit of the
Trainer's own (its settings, precision, accumulation) with only the search's callbacks, no logger,
no sanity check and no checkpoint; then the model's weights and the Trainer's fit state are as
before it, and with ``update_attr`` the model's ``lr`` (or ``learning_rate``) is the suggestion.

``scale_batch_size`` is not here yet: it stops before doing anything and says so.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Literal

from trainmesh.tuner.lr_finder import _ExchangeScheduler, _LRCallback, _LRFinder, lr_attribute, set_lr
from trainmesh.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from trainmesh.trainer.trainer import Trainer


class Tuner:
    """Tunes a Trainer's run: ``Tuner(trainer).lr_find(model, train_dataloaders)``."""

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
        if trainer.fast_dev_run:
            rank_zero_warn("Skipping learning rate finder since `fast_dev_run` is enabled.")
            return None
        attr = lr_attribute(model, attr_name) if update_attr else ""
        finder = _LRFinder(mode, min_lr, max_lr, num_training)
        recorder = _LRCallback(num_training, early_stop_threshold)
        weights = copy.deepcopy(model.state_dict())
        kept = {
            "callbacks": trainer.callbacks,
            "loggers": trainer.loggers,
            "max_steps": trainer.max_steps,
            "limit_val_batches": trainer.limit_val_batches,
            "num_sanity_val_steps": trainer.num_sanity_val_steps,
        }
        try:
            trainer.callbacks, trainer.loggers = [_ExchangeScheduler(finder), recorder], []
            trainer.max_steps, trainer.limit_val_batches = num_training + trainer.global_step, num_training
            trainer.num_sanity_val_steps = 0  # Lightning's search runs the fit loop alone
            trainer.fit(model, train_dataloaders, val_dataloaders, datamodule)
            finder.results = {"lr": recorder.lrs, "loss": recorder.losses}
        finally:
            for name, value in kept.items():
                setattr(trainer, name, value)
            model.load_state_dict(weights)
            trainer._reset_fit_state()  # the next fit configures its optimizers and starts at step 0
        if update_attr:
            lr = finder.suggestion()
            if lr is not None:
                set_lr(model, attr, lr)
        return finder

    def scale_batch_size(self, *args: Any, **kwargs: Any) -> int | None:
        raise NotImplementedError(
            "Tuner.scale_batch_size is not in trainmesh yet: it would retry fits at growing batch sizes until "
            "one runs out of memory. Set the batch size yourself, or run the search under Lightning."
        )
