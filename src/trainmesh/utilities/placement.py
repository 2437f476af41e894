"""Moving a module's tensors to a device and casting them to a dtype: the one place that does it.

``Module.to(dtype=torch.bfloat16)`` casts complex tensors too (to *real* bfloat16, dropping the
imaginary part, with only torch's generic "Casting complex values to real" warning): a RoPE
``freqs_cis`` buffer would silently become the cosines alone. ``Module.to`` also swaps every
DTensor parameter (``torch.utils.swap_tensors``), even one already in place, and a swap moves
the tensor's Python attributes to the discarded copy. ``place_tensors`` casts floating-point
tensors only, touches nothing already where and as it should be, and keeps each parameter
object (and its attributes), so optimizers and other references to it stay valid.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils._python_dispatch import is_traceable_wrapper_subclass


def place_tensors(
    module: nn.Module, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> nn.Module:
    """Move ``module``'s parameters and buffers to ``device`` and cast the floating-point ones to
    ``dtype`` (None: leave that as it is), in place; returns ``module``.

    Complex, integer and bool tensors keep their dtype (``Module.to(dtype)`` keeps integer and
    bool ones, but turns complex ones real).

    >>> m = nn.Linear(2, 2)
    >>> m.register_buffer("rope", torch.ones(2, dtype=torch.complex64))
    >>> place_tensors(m, dtype=torch.bfloat16).weight.dtype, m.rope.dtype
    (torch.bfloat16, torch.complex64)
    """
    buffers: dict[int, torch.Tensor] = {}  # one buffer registered in two modules stays one
    with torch.no_grad():
        for submodule in module.modules():
            for param in submodule._parameters.values():
                if param is not None:
                    _replace_contents(param, _converted(param, device, dtype), device, dtype)
            for key, buffer in submodule._buffers.items():
                if buffer is not None:
                    if id(buffer) not in buffers:
                        buffers[id(buffer)] = _converted(buffer, device, dtype)
                    submodule._buffers[key] = buffers[id(buffer)]
    return module


def _converted(tensor: torch.Tensor, device: torch.device | str | None, dtype: torch.dtype | None) -> torch.Tensor:
    # is_floating_point() is False for complex, integer and bool tensors: their dtype stays.
    return tensor.to(device=device, dtype=dtype if tensor.is_floating_point() else None)


def _replace_contents(
    param: torch.Tensor, new: torch.Tensor, device: torch.device | str | None, dtype: torch.dtype | None
) -> None:
    """Give ``param`` the contents of ``new``, keeping the parameter object."""
    if new is param or (new.dtype == param.dtype and new.device == param.device):
        return  # already in place (a parameter shared by two modules comes here the second time)
    grad = param.grad
    if not is_traceable_wrapper_subclass(new) and torch._has_compatible_shallow_copy_type(param, new):
        param.data = new  # a plain tensor: what Module.to does
        if grad is not None:
            param.grad = _converted(grad, device, dtype)
        return
    # A tensor subclass (DTensor): only a swap keeps the object. swap_tensors moves the Python
    # attributes along with the contents, so the replacement carries param's own first.
    replacement = nn.Parameter(new, requires_grad=param.requires_grad)
    replacement.__dict__.update(param.__dict__)
    param.grad = None  # a gradient held on the side would block the swap
    torch.utils.swap_tensors(param, replacement)
    if grad is not None:
        param.grad = _converted(grad, device, dtype)
