"""A step accumulating gradients over parts of its batch (several backward passes, one apply), in the step probe.

keras-io's gradient accumulation in a ``train_step`` of the program's own cuts its batch into micro-batches, runs a
backward pass on each (``loss / parts``), and applies once: the gradients ``.grad`` accumulated, or a sum of its own
of each pass's gradients. The applied gradient is a mean over the batch's samples, so the run is one process's at
the global batch: backward.py averages each pass's gradients over the processes, and the average is linear (a sum
of averages is the average of the sums). The probe compared each backward pass's gradients, and the first pass of a
half is a quarter's, not the whole batch's first part: refused as "not a mean" (1.36 of the norm, k-probe).

So where the step on the whole batch applies once what its passes accumulated (the last pass's gradients, or the
sum of the passes'), the gradients it applies are compared instead. Anything else the step does between the passes
(a clip of a micro-batch's gradient) changes what it applies, and is compared so. With Keras' random draws on the
parts the step cuts (Dropout on a micro-batch), the probe's halves draw on other rows (step_probe.DrawsDiffer):
under ``N`` processes each process's micro-batch is not a batch-shaped draw (draws.py) and draws the same rows
on every process, so the run cannot draw what one process draws at the global batch (measured: 5.1e-2 apart in
the weights): refused, in these words.
"""

from __future__ import annotations

from typing import Any

import torch

SAME = 1e-6  # float rounding of a sum of a few passes' gradients, relative to their norm


class AccumulatedDraws(Exception):
    """The step accumulates over parts of its batch and draws on them: no run at ``N`` processes draws alike."""


def applies_accumulated(passes: list[tuple[Any, list[Any]]], given: list[tuple[Any, list[Any]]]) -> bool:
    """Whether the step ran several backward passes and applied, once, the last one's gradients or their sum."""
    if len(given) != 1 or len(passes) < 2 or passes is given:
        return False
    applied = given[0][1]
    if any(len(gradients) != len(applied) for _, gradients in passes):
        return False
    last = passes[-1][1]
    summed = [_sum([gradients[i] for _, gradients in passes]) for i in range(len(applied))]
    return _close(applied, last) or _close(applied, summed)


def _sum(gradients: list[Any]) -> Any:
    present = [g for g in gradients if g is not None]
    return None if not present else torch.stack([g.double() for g in present]).sum(0)


def _close(a: list[Any], b: list[Any]) -> bool:
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None or y is not None]
    if not pairs or any(x is None or y is None or x.shape != y.shape for x, y in pairs):
        return False
    scale = sum(float(torch.sum(x.double() ** 2)) for x, _ in pairs) ** 0.5
    difference = sum(float(torch.sum((x.double() - y.double()) ** 2)) for x, y in pairs) ** 0.5
    return difference <= SAME * max(scale, 1e-12)


def reason(passes: int, world: int) -> str:
    return (
        f"the model's train_step accumulates gradients over {passes} parts of its batch it cuts itself (a backward "
        "pass each, one apply), and Keras' random draws on those parts (Dropout on a micro-batch) are drawn on other "
        f"rows than the batch's: under {world} processes each process cuts its own part of the global batch, and "
        "a draw on a piece of it is not one on the process's batch, so every process draws the same rows and the "
        "run differs from one process's at the global batch, silently. Draw on the whole batch before cutting it, "
        "accumulate over steps with the optimizer's gradient_accumulation_steps instead, or run on one process"
    )
