"""A FLOP counter that leaves every number of the counted step as it is without one.

torch's ``FlopCounterMode`` runs an op that its FLOP table does not know through the op's
``CompositeImplicitAutograd`` decomposition when it has one, so that the decomposition's matmuls
count. The decomposition is other arithmetic: ``silu_backward`` and ``mish_backward`` (the backward
of every ``nn.SiLU`` / ``nn.Mish``), ``native_batch_norm`` and ``upsample_nearest2d`` give results
that differ in the last bits from their own kernels'. A step counted under it trains to other
weights (the UvA-DL tutorial 07's energy model: a parameter sum 1e-6 away from Lightning's, from
the one counted step). Here every op runs its own kernel on the real tensors, and the decomposition
runs only to be counted, on shape-only copies of the inputs (the ``meta`` device: no arithmetic, no
random numbers drawn). Counts are torch's ``FlopCounterMode``'s.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map_only
from torch.utils.flop_counter import FlopCounterMode, _FlopCounterMode  # the second: its dispatch side

_DECOMPOSITION = torch._C.DispatchKey.CompositeImplicitAutograd


def _decomposes(func: Any, counted: dict[Any, Any]) -> bool:
    """Whether torch's counter would run ``func`` through its decomposition (its dispatch's test)."""
    if not isinstance(func, torch._ops.OpOverload) or func in counted or func is torch.ops.prim.device.default:
        return False
    return _DECOMPOSITION in func.py_kernels or torch._C._dispatch_has_kernel_for_dispatch_key(
        func.name(), _DECOMPOSITION
    )


def _shape_only(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta")


class ExactFlopCounterMode(FlopCounterMode):
    """``FlopCounterMode`` (same counts, same ``get_total_flops``) whose ops compute what they compute
    without it: ``with ExactFlopCounterMode(display=False) as c: ...; c.get_total_flops()``.

    >>> layer = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.SiLU())
    >>> x = torch.randn(3, 4, requires_grad=True)
    >>> with ExactFlopCounterMode(display=False) as counter:
    ...     layer(x).sum().backward()
    >>> counter.get_total_flops()  # forward 2*3*4*2, backward twice that (input and weight)
    144
    """

    def __enter__(self) -> ExactFlopCounterMode:
        # torch's __enter__ with its dispatch mode replaced by ours (torch/utils/flop_counter.py)
        self.flop_counts.clear()
        self.mod_tracker.__enter__()
        self.mode = _ExactDispatch(self)
        self.mode.__enter__()
        return self


class _ExactDispatch(_FlopCounterMode):
    """torch's counter dispatch, but an op it would decompose runs as itself; its decomposition is
    counted on shape-only inputs."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs if kwargs else {}
        if not _decomposes(func, self.counter.flop_registry):
            return super().__torch_dispatch__(func, types, args, kwargs)
        out = func(*args, **kwargs)  # the op's own kernel: the result a run without the counter gets
        self._count_decomposition(func, args, kwargs)
        return out

    def _count_decomposition(self, func: Any, args: Any, kwargs: Any) -> None:
        try:
            shape_args, shape_kwargs = tree_map_only(torch.Tensor, _shape_only, (args, kwargs))
            with self:  # the decomposition's ops come back here: counted, run on meta tensors
                func.decompose(*shape_args, **shape_kwargs)
        except Exception:  # noqa: BLE001 - an op below without a meta kernel: its FLOPs go uncounted
            pass  # (the figure is lower, an MFU pessimistic; the training's numbers are untouched)
