"""The objects ``Fabric.setup*`` hands back, as Lightning Fabric's ``wrappers.py`` defines them.

- ``_FabricModule``: a module holding the strategy's placed module; its forward casts the inputs,
  runs under the precision's forward context and casts the outputs back (precision.py), and its
  ``state_dict`` is the user's module's (no wrapper prefix).
- ``_FabricOptimizer``: an instance of a class made from the wrapper's and the user optimizer's
  (``isinstance(opt, torch.optim.SGD)`` holds, as Fabric's); ``step`` goes through the Runtime
  (loss scaling under 16-mixed) and then calls the callbacks' ``on_after_optimizer_step``.
- ``_FabricDataLoader``: iterates the distributed loader, each new pass telling its sampler the
  epoch (the count of passes, as Fabric's), batches moved to the device (without a dtype cast).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainmesh.fabric.precision import FabricPrecision
from trainmesh.utilities.apply_func import new_apply_to_collection
from trainmesh.utilities.collections import apply_to_tensors, move_data_to_device

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime

_LIGHTNING_MODULE_STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")


class BackwardGate:
    """Whether the current backward runs inside ``fabric.backward`` (Fabric's ``_in_fabric_backward``)."""

    inside = False


def _refuse_plain_backward(*_: Any) -> None:
    if not BackwardGate.inside:
        raise RuntimeError(
            "The current strategy and precision selection requires you to call `fabric.backward(loss)` instead of "
            "`loss.backward()`."
        )


class _MethodAsForward(nn.Module):
    """A stand-in module whose forward is another module's method (see ``mark_forward_method``)."""

    def __init__(self, method: Callable[..., Any]) -> None:
        super().__init__()
        self.method = method

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.method(*args, **kwargs)


class _FabricModule(nn.Module):
    def __init__(self, forward_module: nn.Module, precision: FabricPrecision, original_module: nn.Module) -> None:
        super().__init__()
        self._forward_module = forward_module
        self._original_module = original_module
        self._precision = precision
        self._forward_methods = set(_LIGHTNING_MODULE_STEP_METHODS)
        self._fabric_module_initialized = True

    @property
    def module(self) -> nn.Module:
        return self._original_module or self._forward_module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        precision = self._precision
        args, kwargs = precision.convert_input((args, kwargs))
        with precision.forward_context():
            output = self._forward_module(*args, **kwargs)
        output = precision.convert_output(output)
        if precision.requires_fabric_backward:
            apply_to_tensors(output, self._register_backward_hook)
        return output

    @staticmethod
    def _register_backward_hook(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.requires_grad:
            tensor.register_hook(_refuse_plain_backward)
        return tensor

    def named_modules(self, memo: set[nn.Module] | None = None, prefix: str = "", remove_duplicate: bool = True) -> Any:
        # Fabric's tree: its DDP wraps the user's module itself (``_forward_module.module.<name>``); trainmesh's
        # DDP wraps a step dispatcher around it, a layer of our own that programs walking the set-up module
        # (named_parameters, modules(), ModelSummary's counts) must not see.
        from trainmesh.strategies.data_parallel import StepDispatcher

        hidden: list[str] = []
        for name, module in super().named_modules(memo, prefix, remove_duplicate):
            if isinstance(module, StepDispatcher) and module.chunk_devices is None and name.endswith(".module"):
                hidden.append(name)
                continue
            for path in hidden:
                if name == f"{path}.module" or name.startswith(f"{path}.module."):
                    name = path + name[len(path) + len(".module") :]
                    break
            yield name, module

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self._original_module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._original_module.load_state_dict(state_dict=state_dict, strict=strict, **kwargs)

    def mark_forward_method(self, method: Callable[..., Any] | str) -> None:
        """Run ``method`` of the user's module through the forward (the strategy's wrapper), as Fabric's."""
        if not isinstance(method, str) and not inspect.ismethod(method):
            raise TypeError(f"Expected a method or a string, but got: {type(method).__name__}")
        name = method if isinstance(method, str) else method.__name__
        if name == "forward":
            raise ValueError("You cannot mark the forward method itself as a forward method.")
        if not inspect.ismethod(getattr(self._original_module, name, None)):
            raise AttributeError(
                f"You marked '{name}' as a forward method, but `{type(self._original_module).__name__}.{name}` does "
                "not exist or is not a method."
            )
        self._forward_methods.add(name)

    def _redirection_through_forward(self, method_name: str) -> Callable[..., Any]:
        # Fabric's: a marked method runs through the strategy's wrapper (DDP) as its forward, so that the
        # wrapper prepares its gradient all-reduce for it. Fabric swaps the user's module's forward for the
        # call; trainmesh's wrappers hold a step dispatcher that runs a named method when the call starts
        # with a StepCall (strategies/data_parallel.py), so nothing is written onto the user's module.
        from trainmesh.strategies.data_parallel import StepCall, StepDispatcher

        wrapper = self._forward_module
        original = self._original_module

        def call_through_forward(*args: Any, **kwargs: Any) -> Any:
            if isinstance(getattr(wrapper, "module", None), StepDispatcher):
                return self.forward(StepCall(method_name), *args, **kwargs)
            if getattr(wrapper, "module", None) is original:  # a wrapper of the user's own (configure_ddp)
                wrapper.module = _MethodAsForward(getattr(original, method_name))
                try:
                    return self.forward(*args, **kwargs)
                finally:
                    wrapper.module = original
            raise RuntimeError(
                f"`{type(original).__name__}.{method_name}` is marked as a forward method, but the strategy's "
                f"wrapper ({type(wrapper).__name__}) cannot run it as its forward; call the module's forward instead"
            )

        return call_through_forward

    def __getattr__(self, item: str) -> Any:
        if (
            item != "_forward_methods"
            and item in self._forward_methods
            and self._forward_module is not self._original_module
        ):
            return self._redirection_through_forward(item)
        try:
            return super().__getattr__(item)
        except AttributeError:
            return getattr(super().__getattr__("_original_module"), item)

    def __setattr__(self, name: str, value: Any) -> None:
        if not getattr(self, "_fabric_module_initialized", False):
            super().__setattr__(name, value)
            return
        # Fabric's: an attribute the user's module has (or no one has) is set on it; the wrapper's own on the wrapper
        original_has = hasattr(self._original_module, name)
        wrapper_has = name in dir(self)
        if original_has or not wrapper_has:
            setattr(self._original_module, name, value)
        if wrapper_has:
            super().__setattr__(name, value)


class _FabricOptimizer:
    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        runtime: Runtime,
        callbacks: list[Any] | None = None,
        precision: FabricPrecision | None = None,
    ) -> None:
        self._optimizer = optimizer
        self._runtime = runtime
        self._precision = precision
        self._callbacks = callbacks or []
        # Fabric's: the wrapper is an instance of the user's optimizer class too
        self.__class__ = type("Fabric" + optimizer.__class__.__name__, (self.__class__, optimizer.__class__), {})

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self._optimizer

    def state_dict(self) -> dict[str, Any]:
        return self._runtime.state_dicts(None, [self._optimizer])["optim"][0]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._optimizer.load_state_dict(state_dict)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if self._precision is not None:  # a precision plugin of the program's may step it (precision.py)
            output = self._precision.optimizer_step(self._runtime, self._optimizer, closure)
        else:
            output = self._runtime.optimizer_step(self._optimizer, closure)
        for callback in self._callbacks:
            hook = getattr(callback, "on_after_optimizer_step", None)
            if callable(hook):
                hook(strategy=self._runtime.strategy, optimizer=self._optimizer)
        return output

    def __getattr__(self, item: str) -> Any:
        return getattr(self._optimizer, item)


class _FabricDataLoader:
    def __init__(self, dataloader: Any, device: torch.device | None, set_epoch: Callable[[int], None]) -> None:
        self.__dict__.update(getattr(dataloader, "__dict__", {}))
        self._dataloader = dataloader
        self._device = device
        self._set_epoch = set_epoch
        self._num_iter_calls = 0

    @property
    def device(self) -> torch.device | None:
        return self._device

    def __len__(self) -> int:
        return len(self._dataloader)

    def __iter__(self) -> Iterator[Any]:
        self._set_epoch(self._num_iter_calls)
        self._num_iter_calls += 1
        if self._device is None:
            yield from iter(self._dataloader)
        else:
            for item in self._dataloader:
                yield move_data_to_device(item, self._device)


def _unwrap(obj: Any) -> Any:
    if isinstance(obj, _FabricModule):
        return obj._forward_module
    if isinstance(obj, _FabricOptimizer):
        return obj.optimizer
    if isinstance(obj, _FabricDataLoader):
        return obj._dataloader
    return obj


def _unwrap_objects(collection: Any) -> Any:
    """``collection`` with Fabric's wrappers replaced by what they hold, at any depth, each mapping,
    sequence and dataclass rebuilt as its own class (Fabric's ``apply_to_collection`` walk): a saved
    ``model.hparams`` stays an ``AttributeDict``, a set-up module inside a nested dict is the module."""
    return new_apply_to_collection(collection, (_FabricModule, _FabricOptimizer, _FabricDataLoader), _unwrap)


def is_wrapped(obj: object) -> bool:
    """Whether ``obj`` came out of ``Fabric.setup*`` (Fabric's ``is_wrapped``)."""
    return isinstance(obj, (_FabricModule, _FabricOptimizer, _FabricDataLoader))
