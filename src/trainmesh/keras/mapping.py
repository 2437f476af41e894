"""Keras losses and metrics as torch functions of ``(y_true, y_pred)`` with Keras' values.

Each mapped loss is the torch function that computes what the Keras loss computes with its
default reduction (``"sum_over_batch_size"``: the mean over the batch), with Keras' shape rules
(a trailing dimension of 1 squeezed or added, as ``squeeze_or_expand_to_same_rank`` does) and
Keras' ``epsilon`` clipping of probabilities. The sparse categorical cross-entropy on logits is
``F.cross_entropy`` itself, the guide's ``torch.nn.CrossEntropyLoss``: a Keras model compiled
with it trains exactly as the keras-io guide's hand-written loop. A Keras loss object with
options these functions do not cover (label smoothing, another reduction or axis, a custom
loss) is called as it is: under the torch backend Keras losses are torch operations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from trainmesh.keras.backend import require_keras

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

_LOSS_ALIASES = {
    "sparse_categorical_crossentropy": "sparse_categorical_crossentropy",
    "categorical_crossentropy": "categorical_crossentropy",
    "binary_crossentropy": "binary_crossentropy",
    "mse": "mean_squared_error",
    "mean_squared_error": "mean_squared_error",
    "mae": "mean_absolute_error",
    "mean_absolute_error": "mean_absolute_error",
}


def same_rank(y_true: torch.Tensor, y_pred: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keras' ``squeeze_or_expand_to_same_rank``: ranks one apart with a trailing 1 are made equal."""
    if y_true.dim() == y_pred.dim() + 1 and y_true.shape[-1] == 1:
        if y_pred.dim() == 1:
            y_pred = y_pred.unsqueeze(-1)
        else:
            y_true = y_true.squeeze(-1)
    elif y_pred.dim() == y_true.dim() + 1 and y_pred.shape[-1] == 1:
        if y_true.dim() == 1:
            y_true = y_true.unsqueeze(-1)
        else:
            y_pred = y_pred.squeeze(-1)
    return y_true, y_pred


def _epsilon() -> float:
    return float(require_keras().config.epsilon())


def _class_last_to_dim1(y_pred: torch.Tensor) -> torch.Tensor:
    return y_pred.movedim(-1, 1) if y_pred.dim() > 2 else y_pred


def sparse_categorical_crossentropy(from_logits: bool) -> LossFn:
    def loss(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        target = y_true.long()
        if target.dim() == y_pred.dim() and target.shape[-1] == 1:
            target = target.squeeze(-1)
        scores = _class_last_to_dim1(y_pred)
        if from_logits:
            return F.cross_entropy(scores, target)
        eps = _epsilon()
        probs = (scores / scores.sum(dim=1, keepdim=True)).clamp(eps, 1.0 - eps)
        return F.nll_loss(torch.log(probs), target)

    return loss


def categorical_crossentropy(from_logits: bool) -> LossFn:
    def loss(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        target = y_true.to(y_pred.dtype)
        if from_logits:
            log_prob = F.log_softmax(y_pred, dim=-1)
        else:
            eps = _epsilon()
            log_prob = torch.log((y_pred / y_pred.sum(dim=-1, keepdim=True)).clamp(eps, 1.0 - eps))
        return -(target * log_prob).sum(dim=-1).mean()

    return loss


def binary_crossentropy(from_logits: bool) -> LossFn:
    def loss(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true, y_pred = same_rank(y_true.to(y_pred.dtype), y_pred)
        if from_logits:
            per_element = F.binary_cross_entropy_with_logits(y_pred, y_true, reduction="none")
        else:
            eps = _epsilon()
            per_element = F.binary_cross_entropy(y_pred.clamp(eps, 1.0 - eps), y_true, reduction="none")
        return per_element.mean(dim=-1).mean()  # Keras: the mean over the last axis, then over the batch

    return loss


def mean_squared_error(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    y_true, y_pred = same_rank(y_true.to(y_pred.dtype), y_pred)
    return F.mse_loss(y_pred, y_true.expand_as(y_pred))


def mean_absolute_error(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    y_true, y_pred = same_rank(y_true.to(y_pred.dtype), y_pred)
    return F.l1_loss(y_pred, y_true.expand_as(y_pred))


def _loss_by_name(name: str, from_logits: bool) -> LossFn:
    canonical = _LOSS_ALIASES[name]
    if canonical == "sparse_categorical_crossentropy":
        return sparse_categorical_crossentropy(from_logits)
    if canonical == "categorical_crossentropy":
        return categorical_crossentropy(from_logits)
    if canonical == "binary_crossentropy":
        return binary_crossentropy(from_logits)
    return mean_squared_error if canonical == "mean_squared_error" else mean_absolute_error


def torch_loss(loss: Any) -> LossFn:
    """The torch function for a Keras loss given by name, as a Keras loss object or function,
    or any callable ``(y_true, y_pred) -> scalar`` (used as it is)."""
    if isinstance(loss, str):
        key = loss.lower()
        if key not in _LOSS_ALIASES:
            raise ValueError(
                f"loss={loss!r} is not a loss trainmesh.keras knows by name; known: {sorted(_LOSS_ALIASES)}. "
                "Pass a keras.losses object or a function (y_true, y_pred) -> scalar tensor instead"
            )
        return _loss_by_name(key, from_logits=False)
    fn = getattr(loss, "fn", None)
    kwargs = dict(getattr(loss, "_fn_kwargs", {}) or {})
    if fn is not None and getattr(loss, "reduction", "sum_over_batch_size") == "sum_over_batch_size":
        from_logits = bool(kwargs.pop("from_logits", False))
        plain = (
            kwargs.pop("axis", -1) == -1
            and not kwargs.pop("label_smoothing", 0)
            and kwargs.pop("ignore_class", None) is None
            and not kwargs
        )
        if plain and getattr(fn, "__name__", "") in _LOSS_ALIASES:
            return _loss_by_name(fn.__name__, from_logits)
    name = getattr(loss, "__name__", None)
    if name in _LOSS_ALIASES:  # keras.losses.mean_squared_error and the like, with default options
        return _loss_by_name(name, from_logits=False)
    if callable(loss):
        return loss  # a Keras loss object with other options, or the user's own: torch ops either way
    raise TypeError(f"loss={loss!r} is neither a loss name, a keras.losses object nor a callable (y_true, y_pred)")


# ---- metrics ---------------------------------------------------------------------------------------
def sparse_categorical_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    target = y_true
    if target.dim() == y_pred.dim() and target.shape[-1] == 1:
        target = target.squeeze(-1)
    return (y_pred.argmax(dim=-1) == target.long()).float().mean()


def categorical_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    return (y_pred.argmax(dim=-1) == y_true.argmax(dim=-1)).float().mean()


def binary_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    y_true, y_pred = same_rank(y_true, y_pred)
    return ((y_pred > threshold).to(y_true.dtype) == y_true).float().mean()


def accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    """``"accuracy"`` as Keras' compile resolves it, from the shapes: binary when the model has
    one output unit, sparse categorical when the labels are indices, else categorical."""
    if y_pred.shape[-1] == 1:
        return binary_accuracy(y_true, y_pred)
    if y_true.dim() < y_pred.dim() or y_true.shape[-1] == 1:
        return sparse_categorical_accuracy(y_true, y_pred)
    return categorical_accuracy(y_true, y_pred)


_METRICS: dict[str, LossFn] = {
    "accuracy": accuracy,
    "acc": accuracy,
    "sparse_categorical_accuracy": sparse_categorical_accuracy,
    "categorical_accuracy": categorical_accuracy,
    "binary_accuracy": binary_accuracy,
    "mae": mean_absolute_error,
    "mean_absolute_error": mean_absolute_error,
    "mse": mean_squared_error,
    "mean_squared_error": mean_squared_error,
}


def torch_metric(metric: Any) -> tuple[str, LossFn]:
    """(the name Keras logs it under, a torch function giving its per-batch mean)."""
    if isinstance(metric, str):
        if metric.lower() not in _METRICS:
            raise ValueError(
                f"metric {metric!r} is not one trainmesh.keras knows by name; known: {sorted(_METRICS)}. "
                "Pass a function (y_true, y_pred) -> scalar tensor (its batch mean is logged)"
            )
        return metric, _METRICS[metric.lower()]
    fn = getattr(metric, "_fn", None)  # keras.metrics.SparseCategoricalAccuracy() and the other mean metrics
    fn_name = getattr(fn, "__name__", "")
    if (
        fn is not None
        and fn_name in _METRICS
        and not (fn_name == "binary_accuracy" and getattr(metric, "_fn_kwargs", {}).get("threshold", 0.5) != 0.5)
    ):
        return str(metric.name), _METRICS[fn_name]
    if callable(metric) and not hasattr(metric, "update_state"):
        return getattr(metric, "__name__", type(metric).__name__), metric
    raise ValueError(
        f"metric {metric!r} cannot be mapped: trainmesh.keras logs per-batch means of "
        f"{sorted(set(_METRICS) - {'acc'})}. For another metric subclass KerasModule and self.log it in "
        "validation_step (a torchmetrics Metric object may be logged as it is)"
    )
