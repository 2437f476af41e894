"""Lightning 1.x's ``Trainer(auto_scale_batch_size=..., auto_lr_find=...)`` and ``trainer.tune(model)``,
which 2.0 replaced by ``Tuner(trainer)``: run as 1.9.5's ``Tuner._tune`` runs them, on trainmesh's
``Tuner`` (the batch-size search first, then the learning-rate finder, which writes its suggestion
onto the model's ``lr`` / ``learning_rate``, or the attribute ``auto_lr_find`` names: 1.9.5's suggestion,
``LightningOneLRFinder``), with every
random generator as before it (1.9.5's ``isolate_rng``). Returns 1.9.5's result: a dict with
``"scale_batch_size"`` (the size found) and ``"lr_find"`` (the finder), each only when it ran.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import torch

from trainmesh.checkpoint import load_checkpoint_file
from trainmesh.seed import isolate_rng
from trainmesh.tuner.lr_finder import _LRFinder, lr_attribute, set_lr
from trainmesh.utilities.lightning_loggers import lightning_named_logger

if TYPE_CHECKING:
    from trainmesh.trainer.lightning1.one_run import LightningOneRun
    from trainmesh.tuner.tuning import Trainer

log = lightning_named_logger(__name__)  # governed as Lightning's by a program's settings of its loggers


class LightningOneLRFinder(_LRFinder):
    """The finder ``trainer.tune`` returns, with pytorch-lightning 1.9.5's ``suggestion``: the steepest
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


def _find_lr(tuner: Any, model: Any, data: tuple[Any, ...], kwargs: dict[str, Any]) -> LightningOneLRFinder | None:
    """The search (trainmesh's Tuner, the attribute checked before it as 1.9.5 does), its suggestion 1.9.5's."""
    update, name = kwargs.pop("update_attr", True), kwargs.pop("attr_name", "")
    attr = lr_attribute(model, name) if update else ""
    found = tuner.lr_find(model, *data, update_attr=False, **kwargs)
    if found is None:
        return None
    finder = LightningOneLRFinder(found.mode, found.lr_min, found.lr_max, found.num_training)
    finder.results = found.results
    if update and (lr := finder.suggestion()) is not None:
        set_lr(model, attr, lr)
        log.info(f"Learning rate set to {lr}")
    return finder


def _start_from_resumed_weights(run: LightningOneRun, model: Any) -> None:
    """1.9.5's ``trainer.tune`` runs its searches as fits: with ``resume_from_checkpoint`` each restores the
    checkpoint's weights (the module's ``on_load_checkpoint`` first) before ``on_fit_start``, where the search
    runs, and its training state only after it; so the searches start from those weights, fresh optimizers and
    step 0, and the model holds those weights after the tune."""
    if run.resume_from_checkpoint is None:
        return
    checkpoint = load_checkpoint_file(run.resume_from_checkpoint)
    if callable(getattr(model, "on_load_checkpoint", None)):
        model.on_load_checkpoint(checkpoint)
    model.load_state_dict(checkpoint["state_dict"])


def tune(
    trainer: Trainer,
    run: LightningOneRun,
    model: Any,
    train_dataloaders: Any = None,
    val_dataloaders: Any = None,
    dataloaders: Any = None,
    datamodule: Any = None,
    scale_batch_size_kwargs: dict[str, Any] | None = None,
    lr_find_kwargs: dict[str, Any] | None = None,
    method: Literal["fit", "validate", "test", "predict"] = "fit",
) -> dict[str, Any]:
    """``trainer.tune(...)`` of pytorch-lightning 1.9.5 (module docstring)."""
    # here: the tuner is imported by a run that tunes, not with the Trainer
    from trainmesh.trainer.lightning1.batch_size_search import LightningOneTuner

    # 1.9.5 sets its defaults ("mode", "update_attr") into the dicts the program passed, which it may print
    scale_given = scale_batch_size_kwargs or {}  # an empty one is not written into, as in 1.9.5
    lr_given = lr_find_kwargs or {}
    result: dict[str, Any] = {}
    tuner = LightningOneTuner(trainer)
    if (train_dataloaders is not None or val_dataloaders is not None) and datamodule is not None:
        raise ValueError(
            "You cannot pass `train_dataloader` or `val_dataloaders` to `trainer.tune()` with a datamodule."
        )
    with isolate_rng():
        run.tuning = True
        try:
            if run.auto_scale_batch_size or run.auto_lr_find:
                _start_from_resumed_weights(run, model)
            if run.auto_scale_batch_size:
                if isinstance(run.auto_scale_batch_size, str):
                    scale_given.setdefault("mode", run.auto_scale_batch_size)
                scale_kwargs = dict(scale_given)
                # 1.9.5's search (batch_size_search.py): no margin, no ceiling, its trial count and size rule
                result["scale_batch_size"] = tuner.scale_batch_size(
                    model, train_dataloaders, val_dataloaders, dataloaders, datamodule, method, **scale_kwargs
                )
            if run.auto_lr_find:
                lr_given.setdefault("update_attr", True)
                lr_kwargs = dict(lr_given)
                if isinstance(run.auto_lr_find, str):
                    lr_kwargs.setdefault("attr_name", run.auto_lr_find)
                data = (train_dataloaders, val_dataloaders, dataloaders, datamodule, method)
                result["lr_find"] = _find_lr(tuner, model, data, lr_kwargs)
        finally:
            run.tuning = False
    return result
