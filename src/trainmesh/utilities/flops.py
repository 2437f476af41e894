"""``measure_flops``: the floating-point operations of one forward (and backward) call."""

from __future__ import annotations

from collections.abc import Callable

import torch


def measure_flops(
    model: torch.nn.Module,
    forward_fn: Callable[[], torch.Tensor],
    loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> int:
    """FLOPs counted by torch's ``FlopCounterMode`` while ``forward_fn()`` runs, and the backward of
    ``loss_fn(output)`` when given. Build the model on the meta device to count without computing.

    >>> model = torch.nn.Linear(4, 2)
    >>> measure_flops(model, lambda: model(torch.ones(3, 4)))
    48
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        if loss_fn is None:
            forward_fn()
        else:
            loss_fn(forward_fn()).backward()
    return int(counter.get_total_flops())
