"""``grad_norm``: the norms of a module's gradients, named as Lightning's loggers group them.

>>> import torch
>>> layer = torch.nn.Linear(2, 1, bias=False)
>>> layer.weight.grad = torch.tensor([[3.0, 4.0]])
>>> grad_norm(layer, 2)
{'grad_2.0_norm/weight': tensor(5.), 'grad_2.0_norm_total': tensor(5.)}
"""

from __future__ import annotations

import torch
from torch import nn


def grad_norm(module: nn.Module, norm_type: float | int | str, group_separator: str = "/") -> dict[str, torch.Tensor]:
    """Each parameter's gradient norm and the norm of all gradients taken as one vector.

    Parameters without a gradient are left out; ``norm_type`` is any positive p or ``"inf"``.
    Called from ``on_before_optimizer_step``, the gradients are the unscaled ones about to be applied.
    """
    p = float(norm_type)
    if p <= 0:
        # Lightning's words: its test_grads.py (and a program) matches on them
        raise ValueError(f"`norm_type` must be a positive number or 'inf' (infinity norm). Got {p}")
    norms = {
        f"grad_{p}_norm{group_separator}{name}": param.grad.detach().norm(p)
        for name, param in module.named_parameters()
        if param.grad is not None
    }
    if norms:
        norms[f"grad_{p}_norm_total"] = torch.stack(list(norms.values())).norm(p)
    return norms
