"""What Fabric's precision plugins do around a set-up module's forward, over trainmesh's Precision.

Fabric's ``_FabricModule.forward`` casts the inputs (``convert_input``), runs the forward in the
plugin's ``forward_context`` and casts the outputs back (``convert_output``). Per setting, as
Fabric's plugins (``lightning/fabric/plugins/precision/{amp,half,double}.py``):

- "32-true": nothing;
- "bf16-mixed" / "16-mixed": floating inputs to bf16 / fp16, the forward under ``torch.autocast``,
  floating outputs to the default dtype;
- "bf16-true" / "16-true" / "64-true": floating inputs to the parameters' dtype, the forward with it
  as the default dtype (tensors made inside come out in it), floating outputs to the default dtype.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch

from trainmesh.precision import Precision
from trainmesh.utilities.collections import apply_to_tensors


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Tensors made inside get ``dtype`` (Fabric's ``_DtypeContextManager``)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _cast_floats(data: Any, dtype: torch.dtype) -> Any:
    return apply_to_tensors(data, lambda t: t.to(dtype) if torch.is_floating_point(t) else t)


class FabricPrecision:
    """Fabric's precision plugin behaviour for one of trainmesh's :class:`Precision` settings."""

    def __init__(self, precision: Precision) -> None:
        self.precision = precision

    @property
    def _true(self) -> bool:
        return self.precision.name in ("bf16-true", "16-true", "64-true")

    def forward_context(self) -> AbstractContextManager[Any]:
        if self.precision.mixed:
            return self.precision.autocast()
        if self._true:
            return default_dtype(self.precision.param_dtype)
        return nullcontext()

    def tensor_init_context(self) -> AbstractContextManager[Any]:
        """Where Fabric's ``init_tensor``/``init_module`` make tensors: in the "-true" dtype."""
        return default_dtype(self.precision.param_dtype) if self._true else nullcontext()

    def convert_input(self, data: Any) -> Any:
        if self.precision.mixed:
            return _cast_floats(data, self.precision.compute_dtype)
        if self._true:
            return _cast_floats(data, self.precision.param_dtype)
        return data

    def convert_output(self, data: Any) -> Any:
        if self.precision.mixed or self._true:
            return _cast_floats(data, torch.get_default_dtype())
        return data

    @property
    def requires_fabric_backward(self) -> bool:
        """Fabric's MixedPrecision overrides ``backward`` (loss scaling): a plain ``loss.backward()`` is refused."""
        return self.precision.mixed
