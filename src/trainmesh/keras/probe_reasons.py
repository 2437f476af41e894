"""Why step_probe.py refuses a step: what its gradients on a batch are, measured against its halves'.

The probe refuses a step whose gradients on a batch are not the mean of its gradients on each half. Two
common programs have a recognisable relation, named in the refusal so that its reader sees what their
program does (before, every refusal said "not a mean over the batch's samples" in general words):
- a loss reduced by a sum (``ops.sum`` of per-sample losses): the batch's gradients are the sum of the
  halves', twice their mean;
- a ratio over the batch (keras-io's ner_with_transformers ``CustomNonPaddingTokenLoss``:
  ``sum(loss * mask) / sum(mask)``, a mean divided by the sum of the sample weights): the batch's
  gradients are the halves' weighted by the batch's own counts, ``a : 1 - a`` with ``a`` other than 1/2.
A step applying an optimizer more than once per batch is looked at apply by apply where all its applies together
show no relation: keras-io's image captioning applies once per caption, each on the whole batch, and its ratio loss
was refused as a step "applying 2 times per batch (as updates on parts of its batch do)". One whose applies show
none (updates on parts of its batch), or differentiating with respect to its inputs, is named from what it called
(probe_facts.py). Anything else (a batch statistic, pairs of samples) keeps the general
wording.
"""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.keras.own_forward import forward_reason
from trainmesh.keras.own_forward import own_override as _own_override
from trainmesh.keras.probe_facts import FIXES

Applies = list[tuple[Any, list[Any]]]  # each optimizer's apply: (the optimizer, its gradients)


def _flat(applies: Applies, keep: list[bool]) -> torch.Tensor:
    grads = [g for _, gs in applies for g in gs]
    return torch.cat([g.detach().double().reshape(-1) for g, k in zip(grads, keep, strict=True) if k])


def relation(whole: Applies, parts: list[Applies], limit: float) -> str:
    """What the whole batch's gradients are of its halves' (a sentence for the reason), or "" for none known.
    A step applying several times per batch (keras-io's image captioning: one tape and one apply per caption,
    each on the whole batch) is looked at apply by apply where all its applies together show no relation."""
    kind, weights = _relation(whole, parts, limit)
    if kind in ("", "mean") and len(whole) > 1 and all(len(part) == len(whole) for part in parts):
        each = [_relation([whole[i]], [[part[i]] for part in parts], limit) for i in range(len(whole))]
        kinds = {k for k, _ in each if k != "mean"}
        kind = ""
        if len(kinds) == 1:
            kind, weights = kinds.pop(), [a for k, found in each for a in found if k != "mean"]
    if kind == "sum":
        return (
            "the loss is a sum over the batch's samples: its gradients on the batch are the sum of its halves' "
            "(twice their mean)"
        )
    if kind == "ratio":
        shown = ", ".join(f"{a:.3f} : {1 - a:.3f}" for a in weights)
        at = f" at each of its {len(weights)} applies per batch" if len(weights) > 1 else ""
        return (
            f"the loss is a ratio over the batch: its gradients on the batch are its halves' weighted "
            f"{shown}{at} (a mean's are 0.5 : 0.5), the weights the batch's own counts, as in "
            "sum(loss * mask) / sum(mask) or a mean divided by the sum of the batch's weights"
        )
    return ""


def _relation(whole: Applies, parts: list[Applies], limit: float) -> tuple[str, list[float]]:
    """("sum", []), ("ratio", [the whole's weight on the first half]), ("mean", []) or ("", [])."""
    grads = [[g for _, gs in run for g in gs] for run in (whole, *parts)]
    if len({len(g) for g in grads}) != 1:
        return "", []
    keep = [all(g is not None for g in column) for column in zip(*grads, strict=True)]
    if not any(keep):
        return "", []
    w, first, second = (_flat(run, keep) for run in (whole, *parts))
    scale = max(float(w.norm()), 1e-12)
    if float((w - (first + second) / 2).norm()) / scale <= limit:
        return "mean", []
    if float((w - first - second).norm()) / scale <= limit:
        return "sum", []
    step = first - second
    if float(step.norm()) / scale > limit:
        a = float(torch.dot(w - second, step) / torch.dot(step, step))
        if 0 < a < 1 and abs(a - 0.5) > 1e-3 and float((w - second - a * step).norm()) / scale <= limit:
            return "ratio", [a]
    return "", []


def step_reason(  # noqa: PLR0913 -- what the probe measured
    model: Any, difference: float, noise: float, world: int, *, samples: int, found: str, own_losses: bool
) -> str:
    """Why a step not a mean over the batch's samples is refused (``found``: what relation() found;
    ``own_losses``: a compiled loss of the program's own)."""
    names = (
        "train_step"
        if _own_override(model, "train_step")
        else "compute_loss"
        if _own_override(model, "compute_loss")
        else "compiled loss"
    )
    if names == "compiled loss" and not found and not own_losses:
        return forward_reason(model, difference, world, samples)
    drawn = f" (torch's own draws in the step alone move them by {noise:.2e})" if noise else ""
    what = (
        f"{found}; its gradients differ from the mean of its halves' by {difference:.2e} of their norm{drawn}"
        if found
        else (
            f"its gradients differ from the mean of its gradients on each half by {difference:.2e} of their "
            f"norm{drawn} (a loss reduced by a sum gives half, a term on a batch statistic such as "
            "keras.ops.std(y_pred) or a loss over pairs of samples other numbers)"
        )
    )
    fix = (
        "Divide by a count that does not depend on the batch's content (the batch's size, or every position: "
        "weigh the positions with sample_weight and keep Keras' default reduction)"
        if "ratio" in found
        else next(
            (words for key, words in FIXES.items() if key in found),
            "Make the loss a mean over the samples (keras.ops.mean of per-sample values, Keras' losses at their "
            "default reduction 'sum_over_batch_size')",
        )
    )
    return (
        f"the model's {names} is not a mean over the batch's samples: on the first {samples} samples of the "
        f"training data {what}. Under {world} processes each one runs the step on its part of every global "
        "batch and trainmesh averages the gradients weighted by the parts' sizes, which is one process's "
        f"gradient only for a mean over the samples: the run would train and differ from one process's, "
        f"silently. {fix}, or run on one process"
    )
