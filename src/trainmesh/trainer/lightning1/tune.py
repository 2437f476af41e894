"""Lightning 1.x's ``Trainer(auto_scale_batch_size=..., auto_lr_find=...)`` and ``trainer.tune(model)``,
which 2.0 replaced by ``Tuner(trainer)``: run as 1.9.5's ``Tuner._tune`` runs them, on 1.9.5's
``Tuner`` (``tuner.py``: each search a fit of its own; the batch-size search first, then the
learning-rate finder, which writes its suggestion onto the model's ``lr`` / ``learning_rate``, or the
attribute ``auto_lr_find`` names), with every random generator as before it (1.9.5's ``isolate_rng``).
Returns 1.9.5's result: a dict with ``"scale_batch_size"`` (the size found) and ``"lr_find"`` (the
finder), each only when it ran.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from trainmesh.checkpoint import load_checkpoint_file
from trainmesh.seed import isolate_rng

if TYPE_CHECKING:
    from trainmesh.trainer.lightning1.one_run import LightningOneRun
    from trainmesh.tuner.tuning import Trainer


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
    from trainmesh.trainer.lightning1.tuner import LightningOneTuner

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
                # 1.9.5's search (batch_size_search.py): no margin, no ceiling, its trial count and size rule
                result["scale_batch_size"] = tuner.scale_batch_size(
                    model, train_dataloaders, val_dataloaders, dataloaders, datamodule, method, **scale_given
                )
            if run.auto_lr_find:
                lr_given.setdefault("update_attr", True)
                data = (train_dataloaders, val_dataloaders, dataloaders, datamodule, method)
                result["lr_find"] = tuner.lr_find(model, *data, **lr_given)
        finally:
            run.tuning = False
    return result
