"""Lightning 1.x's ``Trainer(auto_scale_batch_size=..., auto_lr_find=...)`` and ``trainer.tune(model)``,
which 2.0 replaced by ``Tuner(trainer)``: run as 1.9.5's ``Tuner._tune`` runs them, on trainmesh's
``Tuner`` (the batch-size search first, then the learning-rate finder, which writes its suggestion
onto the model's ``lr`` / ``learning_rate``, or the attribute ``auto_lr_find`` names), with every
random generator as before it (1.9.5's ``isolate_rng``). Returns 1.9.5's result: a dict with
``"scale_batch_size"`` (the size found) and ``"lr_find"`` (the finder), each only when it ran.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Literal

from trainmesh.seed import isolate_rng

if TYPE_CHECKING:
    from trainmesh.trainer.lightning1.one_run import LightningOneRun
    from trainmesh.tuner.tuning import Trainer


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
    from trainmesh.tuner.tuning import Tuner  # here: the tuner is imported by a run that tunes, not with the Trainer

    scale_kwargs, lr_kwargs = dict(scale_batch_size_kwargs or {}), dict(lr_find_kwargs or {})
    result: dict[str, Any] = {}
    tuner = Tuner(trainer)
    if (train_dataloaders is not None or val_dataloaders is not None) and datamodule is not None:
        raise ValueError(
            "You cannot pass `train_dataloader` or `val_dataloaders` to `trainer.tune()` with a datamodule."
        )
    with isolate_rng():
        run.tuning = True
        try:
            if run.auto_scale_batch_size:
                if isinstance(run.auto_scale_batch_size, str):
                    scale_kwargs.setdefault("mode", run.auto_scale_batch_size)
                # 1.9.5's search keeps the size found (2.x's takes 5% off it) and has no ceiling
                scale_kwargs.setdefault("margin", 0.0)
                scale_kwargs.setdefault("max_val", sys.maxsize)
                result["scale_batch_size"] = tuner.scale_batch_size(
                    model, train_dataloaders, val_dataloaders, dataloaders, datamodule, method, **scale_kwargs
                )
            if run.auto_lr_find:
                if isinstance(run.auto_lr_find, str):
                    lr_kwargs.setdefault("attr_name", run.auto_lr_find)
                lr_kwargs.setdefault("update_attr", True)
                result["lr_find"] = tuner.lr_find(
                    model, train_dataloaders, val_dataloaders, dataloaders, datamodule, method, **lr_kwargs
                )
        finally:
            run.tuning = False
    return result
