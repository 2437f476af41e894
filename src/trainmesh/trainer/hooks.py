"""Calls a hook on the module and on every callback that overrides it.

Which callbacks override which hook is worked out once per run, so a hook nobody overrides
costs one dict lookup in the training step.
"""

from __future__ import annotations

import inspect
from typing import Any

from trainmesh.callbacks.base import Callback, overrides
from trainmesh.trainer.unsupported_hooks import refuse_uncalled_hooks
from trainmesh.trainer_view import TrainerView

# The positional arguments the Trainer passes to each batch-level hook (after trainer and
# module, for a callback). Lightning programs often define fewer (``training_step(self,
# batch)``): such a hook gets only the first ones it accepts.
_PASSED_ARGS = {
    "training_step": 2,
    "validation_step": 2,
    "test_step": 2,
    "predict_step": 2,
    "on_train_batch_start": 2,
    "on_train_batch_end": 3,
    # evaluation's batch hooks: dataloader_idx last, where there are several loaders
    "on_validation_batch_start": 3,
    "on_test_batch_start": 3,
    "on_predict_batch_start": 3,
    "on_validation_batch_end": 4,
    "on_test_batch_end": 4,
    "on_predict_batch_end": 4,
    "on_before_backward": 1,
    "on_before_optimizer_step": 1,
    "on_before_zero_grad": 1,
}


class _LeadingArgs:
    """Calls ``function(owner, *args[:count])``: a hook that accepts fewer arguments than the
    Trainer passes. A plain object (not a closure), so a module holding it still pickles."""

    def __init__(self, function: Any, owner: Any, count: int) -> None:
        self.function, self.owner, self.count = function, owner, count

    def __call__(self, *args: Any) -> Any:
        return self.function(self.owner, *args[: self.count])


def _positional_capacity(method: Any) -> int | None:
    """How many positional arguments ``method`` takes; None: any number (``*args``) or unknown."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: call it as is
        return None
    count = 0
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return None
        if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            count += 1
    return count


def fit_hook_arities(obj: Any, *, leading: int = 0) -> None:
    """Make each batch hook of ``obj`` that accepts fewer arguments than the Trainer passes
    take just its leading ones, by an instance attribute set once per run: the signature is
    read here, never per step, and a hook with the full signature is left untouched.
    ``leading``: the arguments passed before the hook's own (trainer and module: 2).

    >>> class M:
    ...     def training_step(self, batch):
    ...         return batch
    >>> m = M(); fit_hook_arities(m); m.training_step("b", 0)
    'b'
    """
    for hook, passed in _PASSED_ARGS.items():
        # A plain function on the class (not a staticmethod, a partial or a builtin): its first
        # parameter is self. Anything else is called with every argument, as before.
        function = inspect.getattr_static(type(obj), hook, None)
        if not inspect.isfunction(function) or hook in vars(obj):
            continue
        capacity = _positional_capacity(function)
        if capacity is not None and capacity - 1 < leading + passed:  # - 1: self
            object.__setattr__(obj, hook, _LeadingArgs(function, obj, capacity - 1))


class HookDispatcher:
    def __init__(self, trainer: TrainerView, module: Any, callbacks: list[Callback]) -> None:
        from trainmesh.module import Module

        self._trainer = trainer
        self._module = module
        self._callbacks = callbacks
        self._module_base = Module
        self._by_hook: dict[str, list[Callback]] = {}
        self._module_overrides: dict[str, bool] = {}
        refuse_uncalled_hooks(module, callbacks)  # before anything runs: setup is the stage's first hook
        fit_hook_arities(module)
        for callback in callbacks:
            fit_hook_arities(callback, leading=2)

    def callbacks_for(self, hook: str) -> list[Callback]:
        found = self._by_hook.get(hook)
        if found is None:
            found = [cb for cb in self._callbacks if overrides(cb, hook, Callback)]
            self._by_hook[hook] = found
        return found

    def module_overrides(self, hook: str) -> bool:
        found = self._module_overrides.get(hook)
        if found is None:
            found = hasattr(self._module, hook) and (
                not isinstance(self._module, self._module_base) or overrides(self._module, hook, self._module_base)
            )
            self._module_overrides[hook] = found
        return found

    def overridden(self, hook: str) -> bool:
        """Whether the module or any callback overrides ``hook``."""
        return bool(self.callbacks_for(hook)) or self.module_overrides(hook)

    def call(self, hook: str, *args: Any) -> Any:
        """The module's hook first (it may log metrics that callbacks then read), then callbacks."""
        result = None
        if self.module_overrides(hook):
            result = getattr(self._module, hook)(*args)
        for callback in self.callbacks_for(hook):
            getattr(callback, hook)(self._trainer, self._module, *args)
        return result

    def call_callbacks(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks_for(hook):
            getattr(callback, hook)(self._trainer, self._module, *args)

    def call_module(self, hook: str, *args: Any) -> Any:
        if self.module_overrides(hook):
            return getattr(self._module, hook)(*args)
        return None
