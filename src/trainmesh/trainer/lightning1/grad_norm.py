"""Lightning 1.x's ``Trainer(track_grad_norm=p)``, which 2.0 removed: at each optimizer step, once the
gradients exist and before clipping, the gradients' p-norms (pytorch-lightning 1.9.5's
``utilities.grads.grad_norm``: each parameter's, and the total, rounded to 4 places) go to the module's
``log_grad_norm``, whose default logs them on step and epoch. Run by a callback the Trainer adds at
fit's start (``GradNormTracking``), after the other callbacks' ``on_before_optimizer_step`` and before
the module's (1.9.5 tracks after both: the same values unless the module's hook changes gradients).
"""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.callbacks.base import Callback
from trainmesh.trainer_view import TrainerView


def check_norm_type(track_grad_norm: Any) -> None:
    """1.9.5's check of ``track_grad_norm``: -1 (off), a positive number or ``"inf"``."""
    valid = track_grad_norm == "inf" or (
        isinstance(track_grad_norm, (int, float)) and (track_grad_norm == -1 or float(track_grad_norm) > 0)
    )
    if not valid:
        raise ValueError(
            f"`track_grad_norm` must be a positive number or 'inf' (infinity norm). Got {track_grad_norm}."
        )


def grad_norm(module: torch.nn.Module, norm_type: float | int | str, group_separator: str = "/") -> dict[str, float]:
    """Each parameter's gradient p-norm and the total's, rounded to 4 places (pytorch-lightning 1.9.5's).

    >>> layer = torch.nn.Linear(2, 1)
    >>> layer.weight.grad, layer.bias.grad = torch.tensor([[3.0, 4.0]]), torch.tensor([0.0])
    >>> grad_norm(layer, 2)
    {'grad_2.0_norm/weight': 5.0, 'grad_2.0_norm/bias': 0.0, 'grad_2.0_norm_total': 5.0}
    """
    norm = float(norm_type)
    norms = {
        f"grad_{norm}_norm{group_separator}{name}": p.grad.data.norm(norm)
        for name, p in module.named_parameters()
        if p.grad is not None
    }
    if norms:
        norms[f"grad_{norm}_norm_total"] = torch.tensor(list(norms.values())).norm(norm)
    return {k: round(v.item(), 4) for k, v in norms.items()}


class GradNormTracking(Callback):
    """Calls ``module.log_grad_norm(norms)`` at each optimizer step (``Trainer(track_grad_norm=p)``)."""

    def __init__(self, norm_type: float | int | str) -> None:
        self.norm_type = norm_type

    def on_before_optimizer_step(self, trainer: TrainerView, pl_module: Any, optimizer: Any) -> None:
        loggers = trainer.loggers
        separator = getattr(loggers[0], "group_separator", "/") if len(loggers) == 1 else "/"
        norms = grad_norm(pl_module, self.norm_type, separator)
        if norms:
            pl_module.log_grad_norm(norms)
