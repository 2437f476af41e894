"""Modules built without their initialisation, as Lightning's ``_EmptyInit``: for weights a
checkpoint fills at once (``init_module(empty_init=True)`` of the Trainer and of the Fabric).
Skipping ``torch.nn.init`` also skips its random draws, so what the program draws after the
block is what it draws under Lightning."""

from __future__ import annotations

from typing import Any

from torch.overrides import TorchFunctionMode


class SkipInit(TorchFunctionMode):
    """``torch.nn.init``'s functions return their tensor unchanged while ``enabled``.

    >>> import torch
    >>> with SkipInit(enabled=True):
    ...     torch.nn.init.ones_(torch.zeros(1))
    tensor([0.])
    """

    def __init__(self, *, enabled: bool) -> None:
        super().__init__()
        self.enabled = enabled

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.enabled and getattr(func, "__module__", None) == "torch.nn.init":
            return kwargs["tensor"] if "tensor" in kwargs else args[0]
        return func(*args, **kwargs)
