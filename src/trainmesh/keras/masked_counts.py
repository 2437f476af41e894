"""A compiled loss reduced over a mask, divided by the global batch's count of unmasked positions.

Keras applies a mask to a loss two ways: the model's output carries a Keras mask
(``Embedding(mask_zero=True)``, ``Masking``, propagated through ``LSTM(return_sequences=True)``...), or the
loss is given ``ignore_class``. Its default reduction then divides by the batch's count of unmasked
positions: keras/src/losses/loss.py ``apply_mask`` weighs each unmasked position ``total / valid`` (the
positions of the batch over the unmasked ones), and ``reduce_values`` divides the weighted sum by
``total``, so the loss is ``sum(loss * sample_weight * mask) / valid``. Under ``N`` processes each
process would divide by its own part's count, and the processes' gradients are averaged weighted by
their shares of the samples (``b_r / b``): one process's only when every part holds as many unmasked
positions (measured before, 2 x 16 against Keras at 32: a per-token tagger 3.5e-3 apart in History,
``Masking`` + GRU 2.6e-2, ``ignore_class=0`` segmentation 1.4e-3; /work/progs/k-progs4).

So for the length of the call Keras' ``apply_mask`` is routed (its module's function, restored after):
within a step that every process takes, each process's count of unmasked positions and its batch size
are summed over the processes (one small all-reduce, before backward), and each unmasked position is
weighed ``total_r * (b / b_r) / valid`` instead of ``total_r / valid_r``. Averaged with the weights
``b_r / b``, the processes' losses and gradients are then ``sum over the global batch / valid``: Keras'
at the global batch. The loss tracker (a ``Mean`` weighted by each batch's size, summed over the
processes) reads the same. A step only rank 0 takes (an evaluation's last, its batch the global one)
and one process are Keras' own. Masked metrics are not concerned: Keras calls ``apply_mask`` for them
with ``reduction="sum"`` (sums and counts, which add up over the processes), which is left as it is.
An evaluation step that more than one process but not all take (3 processes or more, uneven shares) has no
count to sum over all: refused at the call's first masked loss (:func:`refuse_partly_taken`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainmesh.keras.collectives import all_reduce_sum
from trainmesh.runtime import Runtime

MEANS = ("mean", "sum_over_batch_size")  # the reductions apply_mask turns into a mean over the unmasked positions


@contextlib.contextmanager
def over_the_global_count(
    runtime: Runtime,
    taking: Callable[[], list[bool] | None],
    local: Callable[[], int],
    evaluation_steps: Callable[[], list[int] | None] = lambda: None,
) -> Iterator[None]:
    """Keras' ``apply_mask`` divides by the global batch's unmasked count within the block (``taking()``:
    which processes take the running step, None outside one; ``local()``: this process's batch size;
    ``evaluation_steps()``: how many evaluation steps each process takes, None where not known)."""
    if runtime.world_size == 1:
        yield
        return
    from keras.src.losses import loss as keras_loss

    keras_apply = keras_loss.apply_mask
    checked = [False]

    # Under jit_compile Keras' step is torch.compile'd: dynamo cannot trace which processes take the step (Python
    # state) nor the all-reduce (it failed inside dynamo: "BooleanAtom not allowed in this context"), so a masked
    # mean runs eagerly within the compiled step (a graph break). Keras calls apply_mask for every loss and metric:
    # one with no mask or not a mean reduction is Keras' own, traced with the rest of the step (no break).
    @torch.compiler.disable
    def masked_mean(sample_weight: Any, mask: Any, dtype: Any, reduction: Any) -> Any:
        takers = taking()
        if takers is not None and not checked[0]:  # the call's first masked loss (every process at once)
            checked[0] = True
            refuse_partly_taken(evaluation_steps())
        if takers is None or takers == [True] + [False] * (len(takers) - 1):  # rank 0's batch is the global one
            return keras_apply(sample_weight, mask, dtype, reduction)  # (or no step)
        if not all(takers):  # 3 processes or more, evaluation data of uneven shares: no count to sum over all
            raise RuntimeError(
                f"an evaluation step taken by the processes {takers} computes a loss over a mask, which Keras "
                "divides by the step's global count of unmasked positions: it cannot be summed over only some "
                "processes. Use evaluation data of a number of samples that is a multiple of processes x "
                "batch_size, or evaluate on one process"
            )
        return _weighed(sample_weight, mask, dtype, _global_weight(runtime, mask, dtype, local()))

    def apply_mask(sample_weight: Any, mask: Any, dtype: Any, reduction: Any) -> Any:
        if mask is None or reduction not in MEANS:
            return keras_apply(sample_weight, mask, dtype, reduction)
        return masked_mean(sample_weight, mask, dtype, reduction)

    keras_loss.apply_mask = apply_mask
    try:
        yield
    finally:
        keras_loss.apply_mask = keras_apply


def refuse_partly_taken(counts: list[int] | None) -> None:
    """An evaluation of which a step is taken by more than one process but not by all (3 processes or more: the
    last evaluation step of uneven shares), with a loss over a mask: refused at the call's first masked loss (the
    first training step, before anything is updated), not at that evaluation step (after an epoch's training)."""
    for step in range(max(counts or [0])):
        takers = [count > step for count in counts or []]
        if 1 < sum(takers) < len(takers):
            raise ValueError(
                f"the processes take {counts} evaluation steps on their shares of the evaluation data, so its step "
                f"{step} is taken by the processes {[r for r, t in enumerate(takers) if t]} only, and the model's "
                "loss is computed over a mask, which Keras divides by the step's global count of unmasked "
                "positions: a count cannot be summed over only some processes. Use evaluation data of a number "
                "of samples that is a multiple of processes x batch_size (a PyDataset or a DataLoader: of "
                "batches, a multiple of the processes), or evaluate on one process"
            )


def _weighed(sample_weight: Any, mask: Any, dtype: Any, weight: Any) -> Any:
    """Keras' ``apply_mask`` at a mean reduction, each unmasked position weighing ``weight``. As Keras' own, it
    multiplies a given ``sample_weight`` in place (torch: ``*=`` on the step's tensor), and the compiled weighted
    metrics Keras updates after the loss read it so: kept, so that they read what they read at the global batch."""
    from keras.src.losses.loss import squeeze_or_expand_to_same_rank

    from keras import ops

    float_mask = ops.where(ops.cast(mask, "bool"), weight, 0)
    if sample_weight is None:
        return float_mask
    sample_weight = ops.cast(sample_weight, dtype=dtype)
    float_mask, sample_weight = squeeze_or_expand_to_same_rank(float_mask, sample_weight)
    sample_weight *= float_mask
    return sample_weight


def _global_weight(runtime: Runtime, mask: Any, dtype: Any, batch: int) -> Any:
    """``total_r * (b / b_r) / valid``: an unmasked position's weight, divided as Keras divides (float32 ``total``
    over ``valid``, both whole numbers), so that at even batches it is Keras' ``total / valid`` at the global batch."""
    from keras import ops

    mask = ops.convert_to_tensor(mask)
    valid = torch.sum(mask.to(torch.float64)).reshape(1)
    summed = all_reduce_sum(runtime, [torch.cat([valid, valid.new_tensor([float(batch)])])])[0]
    total = summed[1] * (float(mask.numel()) / batch)  # this part's positions, scaled to b samples (no host sync)
    return _divided(total, summed[0], dtype)


class CountTape:
    """The unmasked counts of the step probe's run on a whole batch, in the order its losses took them, read
    back in its runs on the halves (step_probe.py): each half divides by the whole batch's count, as each
    process divides by the global batch's in the run, so that the probe compares what the run computes."""

    def __init__(self) -> None:
        self.counts: list[Any] = []
        self.replaying: tuple[int, int] | None = None  # (rows, whole batch) of a replaying run
        self.position = 0

    def replay(self, rows: int, whole: int) -> None:
        self.replaying, self.position = (rows, whole), 0


@contextlib.contextmanager
def counted_alike(tape: CountTape) -> Iterator[None]:
    """Keras' ``apply_mask`` records the whole batch's counts in ``tape``, or (replaying) divides by them."""
    from keras.src.losses import loss as keras_loss

    keras_apply = keras_loss.apply_mask

    def apply_mask(sample_weight: Any, mask: Any, dtype: Any, reduction: Any) -> Any:
        if mask is None or reduction not in MEANS:
            return keras_apply(sample_weight, mask, dtype, reduction)
        if tape.replaying is None:
            tape.counts.append(torch.sum(torch.as_tensor(mask).to(torch.float64)).item())
            return keras_apply(sample_weight, mask, dtype, reduction)
        if tape.position >= len(tape.counts):  # the runs differ: this half's own count (the probe then compares)
            return keras_apply(sample_weight, mask, dtype, reduction)
        (rows, whole), valid = tape.replaying, tape.counts[tape.position]
        tape.position += 1
        return _weighed(
            sample_weight, mask, dtype, _divided(float(torch.as_tensor(mask).numel()) * whole / rows, valid, dtype)
        )

    keras_loss.apply_mask = apply_mask
    try:
        yield
    finally:
        keras_loss.apply_mask = keras_apply


def _divided(total: Any, valid: Any, dtype: Any) -> Any:
    from keras import ops

    return ops.divide_no_nan(ops.cast(total, dtype), ops.cast(valid, dtype))
