"""What Fabric's precision plugins do around a set-up module's forward, over trainmesh's Precision.

Fabric's ``_FabricModule.forward`` casts the inputs (``convert_input``), runs the forward in the
plugin's ``forward_context`` and casts the outputs back (``convert_output``). Per setting, as
Fabric's plugins (``lightning/fabric/plugins/precision/{amp,half,double}.py``):

- "32-true": nothing;
- "bf16-mixed" / "16-mixed": floating inputs to bf16 / fp16, the forward under ``torch.autocast``,
  floating outputs to the default dtype;
- "bf16-true" / "16-true" / "64-true": floating inputs to the parameters' dtype, the forward with it
  as the default dtype (tensors made inside come out in it), floating outputs to the default dtype.

A precision plugin of the program's own class (``class ScaledPrecision(Precision)`` given as
``Fabric(plugins=...)``) runs for its ``precision`` setting, and each of Fabric's precision hooks its
class defines is called where Fabric calls it (measured beside Fabric 2.6.6): ``convert_module`` in
``setup``, ``module_init_context``/``tensor_init_context`` in ``init_module``/``init_tensor``,
``convert_input``/``forward_context``/``convert_output`` around the forward (and ``forward_context`` in
``autocast``), ``pre_backward``/``backward``/``post_backward`` in ``fabric.backward``, ``optimizer_step``
in the optimizer's ``step``, ``unscale_gradients``/``main_params`` in ``clip_gradients``. Fabric calls
its ``state_dict``/``load_state_dict``/``teardown`` nowhere, and neither does this.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

from trainmesh.precision import Precision, default_dtype
from trainmesh.utilities.collections import apply_to_tensors

# ``runtime`` below is a trainmesh.Runtime, typed Any: trainmesh.plugins.precision (which the
# strategies import) reads this module's casts for its Fabric hooks' defaults


def _cast_floats(data: Any, dtype: torch.dtype) -> Any:
    return apply_to_tensors(data, lambda t: t.to(dtype) if torch.is_floating_point(t) else t)


def own_hooks(plugin: Any) -> set[str]:
    """The Fabric precision hooks ``plugin``'s class defines itself (not trainmesh's classes)."""
    if plugin is None:
        return set()
    return {
        name
        for cls in type(plugin).__mro__
        if cls is not object and not cls.__module__.startswith("trainmesh.")
        for name in vars(cls)
        if name in HOOKS
    }


HOOKS = (
    *("convert_module", "module_init_context", "tensor_init_context", "forward_context", "convert_input"),
    *("convert_output", "pre_backward", "backward", "post_backward", "optimizer_step", "unscale_gradients"),
    "main_params",
)


class FabricPrecision:
    """Fabric's precision plugin behaviour for one of trainmesh's :class:`Precision` settings, with the
    hooks a plugin of the program's own class defines."""

    def __init__(self, precision: Precision, *, plugin: Any = None) -> None:
        self.precision = precision
        self.plugin = plugin
        self._own = own_hooks(plugin)

    def _theirs(self, hook: str) -> Callable[..., Any] | None:
        return getattr(self.plugin, hook) if hook in self._own else None

    def convert_module(self, module: nn.Module) -> nn.Module:
        """The plugin's conversion before the strategy places the module (trainmesh's own setting
        converts it while placing it)."""
        convert = self._theirs("convert_module")
        return convert(module) if convert is not None else module

    def module_init_context(self) -> AbstractContextManager[Any]:
        theirs = self._theirs("module_init_context")
        return theirs() if theirs is not None else self._own_tensor_init_context()

    @property
    def _true(self) -> bool:
        return self.precision.name in ("bf16-true", "16-true", "64-true")

    def forward_context(self) -> AbstractContextManager[Any]:
        if (theirs := self._theirs("forward_context")) is not None:
            return theirs()
        if self.precision.mixed:
            return self.precision.autocast()
        if self._true:
            return default_dtype(self.precision.param_dtype)
        return nullcontext()

    def tensor_init_context(self) -> AbstractContextManager[Any]:
        theirs = self._theirs("tensor_init_context")
        return theirs() if theirs is not None else self._own_tensor_init_context()

    def _own_tensor_init_context(self) -> AbstractContextManager[Any]:
        """Where Fabric's ``init_tensor``/``init_module`` make tensors: in the "-true" dtype."""
        return default_dtype(self.precision.param_dtype) if self._true else nullcontext()

    def convert_input(self, data: Any) -> Any:
        if (theirs := self._theirs("convert_input")) is not None:
            return theirs(data)
        if self.precision.mixed:
            return _cast_floats(data, self.precision.compute_dtype)
        if self._true:
            return _cast_floats(data, self.precision.param_dtype)
        return data

    def convert_output(self, data: Any) -> Any:
        if (theirs := self._theirs("convert_output")) is not None:
            return theirs(data)
        if self.precision.mixed or self._true:
            return _cast_floats(data, torch.get_default_dtype())
        return data

    @property
    def requires_fabric_backward(self) -> bool:
        """Fabric's MixedPrecision overrides ``backward`` (loss scaling): a plain ``loss.backward()`` is refused."""
        return self.precision.mixed

    def backward(self, runtime: Any, tensor: torch.Tensor, module: nn.Module | None, *args: Any, **kwargs: Any) -> None:
        """Fabric's ``Strategy.backward``: the plugin's ``pre_backward``, its ``backward`` (else the Runtime's,
        which scales the loss under 16-mixed), its ``post_backward``."""
        if (pre := self._theirs("pre_backward")) is not None:
            pre(tensor, module)
        if (theirs := self._theirs("backward")) is not None:
            theirs(tensor, module, *args, **kwargs)
        else:
            runtime.backward(tensor, *args, **kwargs)
        if (post := self._theirs("post_backward")) is not None:
            post(tensor, module)

    def optimizer_step(self, runtime: Any, optimizer: torch.optim.Optimizer, closure: Any) -> Any:
        if (theirs := self._theirs("optimizer_step")) is not None:
            return theirs(optimizer, **({"closure": closure} if closure is not None else {}))
        return runtime.optimizer_step(optimizer, closure)

    def clip_options(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The Runtime's clipping options where the plugin unscales the gradients (then it does, and the
        Runtime does not) or names the parameters to clip (``main_params``), as Fabric's clipping asks it."""
        options: dict[str, Any] = {}
        if (unscale := self._theirs("unscale_gradients")) is not None:
            unscale(optimizer)
            options["unscale"] = False
        if (main_params := self._theirs("main_params")) is not None:
            options["parameters"] = list(main_params(optimizer))
        return options
