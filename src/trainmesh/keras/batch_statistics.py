"""BatchNormalization in a training step under several processes: the moments of the global batch.

One process at a global batch of ``G`` normalises each BatchNormalization layer's input with the mean
and variance of all ``G`` samples (Keras' torch ``moments``: ``mean(x)``, ``mean(x**2) - mean**2``) and
moves its moving statistics toward them. Each of ``N`` processes at ``b`` would use the moments of its
own ``b`` samples: other normalised activations, other gradients, other moving statistics, silently
(the keras-io distributed guide's convnet trained apart from one process's). Within a training step,
Keras' ``BatchNormalization._moments`` is therefore computed from the sums of ``x`` and ``x**2`` over
every process (one all_reduce of them and the count per layer call, one more in backward), and differentiably: the gradient
that reaches each process's sums is what one process's loss sends to those samples. The processes'
gradients are averaged with weights ``b_r / G`` (sync.py), so the backward sum is weighted alike and
divided by this process's weight: ``sum_s (b_s / G) u_s / (b_r / G)``, which the weighted average turns
into one process's gradient also where the processes' batches differ in size. The moving statistics
follow the global moments, the same on every process.

Keras' ``synchronized=True`` (TensorFlow only) is not needed for this. A layer given a mask normalises
over its unmasked positions: refused at its first call in a training step under several processes (the
masked sums are not gathered yet). Layers in inference (``training=False``), evaluation and prediction
use the moving statistics, as Keras does.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainmesh.runtime import Runtime


class _SummedOverProcesses(torch.autograd.Function):
    """Forward: the tensor (its last entry this process's count) summed over the processes. Backward: the
    gradient weighted by this process's share of the global count, summed over the processes, divided by
    this process's share (see the module's doc)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, runtime: Runtime) -> torch.Tensor:
        summed = runtime.all_reduce(tensor.detach().clone(), "sum")
        ctx.runtime, ctx.share = runtime, float(tensor[-1]) / float(summed[-1])
        return summed

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        summed = ctx.runtime.all_reduce((grad * ctx.share).contiguous(), "sum")
        return summed / ctx.share, None


def global_moments(runtime: Runtime, inputs: Any, axes: list[int]) -> tuple[Any, Any]:
    """The mean and variance over ``axes`` of every process's ``inputs`` together (as Keras' torch
    ``moments`` computes them on one process: float32 for float16 inputs); one all_reduce."""
    x = inputs.float() if inputs.dtype == torch.float16 else inputs
    count = 1
    for axis in axes:
        count *= int(x.shape[axis])
    local = [torch.sum(x, dim=axes).reshape(-1), torch.sum(torch.square(x), dim=axes).reshape(-1)]
    summed = _SummedOverProcesses.apply(torch.cat([*local, x.new_full((1,), float(count))]), runtime)
    width, total = local[0].shape[0], summed[-1].detach()
    mean = summed[:width] / total
    variance = summed[width : 2 * width] / total - torch.square(mean)
    shape = [d for i, d in enumerate(x.shape) if i not in set(axes)]
    mean, variance = mean.reshape(shape), variance.reshape(shape)
    if x is not inputs:
        limit = torch.finfo(torch.float16)
        mean, variance = (torch.clip(v, limit.min, limit.max).to(inputs.dtype) for v in (mean, variance))
    return mean, variance


@contextlib.contextmanager
def over_the_global_batch(runtime: Runtime, in_training_step: Callable[[], bool]) -> Iterator[None]:
    """Keras' BatchNormalization takes the global batch's moments in training steps within the block."""
    if runtime.world_size == 1:
        yield
        return
    from keras.src.layers.normalization.batch_normalization import BatchNormalization

    keras_moments = vars(BatchNormalization)["_moments"]

    @functools.wraps(keras_moments)
    def _moments(self: Any, inputs: Any, mask: Any) -> Any:
        if not in_training_step():
            return keras_moments(self, inputs, mask)
        if mask is not None:
            raise ValueError(
                f"the BatchNormalization layer {self.name!r} was given a mask in a training step under "
                f"{runtime.world_size} processes: trainmesh.keras normalises over the global batch (as one process "
                "does) from every process's sums, which it does not gather for masked inputs yet; each process "
                "would normalise its own part of the batch, silently. Run on one process, or leave out the mask"
            )
        return global_moments(runtime, inputs, list(self._reduction_axes))

    type.__setattr__(BatchNormalization, "_moments", _moments)
    try:
        yield
    finally:
        type.__setattr__(BatchNormalization, "_moments", keras_moments)
