"""Lightning 2.6's loop internals that its loop modules hold (the restart stages, the closures the
automatic and manual optimization loops build, their results): trainmesh's loop is its own, so these
exist under Lightning's paths to import, and refuse when used, saying what to use instead. Lightning's
``check_finite_loss`` is a plain check on a loss and works as Lightning's."""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.utilities.refusal import refused_class

__all__ = ["AbstractClosure", "Closure", "ManualResult", "OutputResult", "RestartStage", "check_finite_loss"]

_LOOP = (
    "Lightning's loop internals; trainmesh's Trainer runs its own loop, so there is no such object to make. "
    "Override the LightningModule's hooks (training_step, optimizer_step, on_train_batch_end, ...) instead"
)
RestartStage = refused_class("RestartStage", _LOOP, module=__name__)
AbstractClosure = refused_class("AbstractClosure", _LOOP, module=__name__)
Closure = refused_class("Closure", _LOOP, module=__name__)
OutputResult = refused_class("OutputResult", _LOOP, module=__name__)
ManualResult = refused_class("ManualResult", _LOOP, module=__name__)


def check_finite_loss(loss: Any) -> None:
    """Raise where ``loss`` (a tensor, or None) holds a NaN or an infinity, as Lightning's loop checks.

    Args:
        loss: the training step's loss, or None.

    Raises:
        ValueError: the loss is not finite.

    Examples:
        >>> check_finite_loss(torch.tensor(1.0)); check_finite_loss(None)
        >>> check_finite_loss(torch.tensor(float("nan")))
        Traceback (most recent call last):
        ...
        ValueError: The loss returned in `training_step` is nan.
    """
    if loss is not None and not torch.isfinite(loss).all():
        raise ValueError(f"The loss returned in `training_step` is {loss}.")
