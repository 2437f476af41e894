"""Calls a hook on the module and on every callback that overrides it.

Which callbacks override which hook is worked out once per run, so a hook nobody overrides
costs one dict lookup in the training step.
"""

from __future__ import annotations

from typing import Any

from trainmesh.callbacks.base import Callback, overrides


class HookDispatcher:
    def __init__(self, trainer: Any, module: Any, callbacks: list[Callback]) -> None:
        from trainmesh.module import Module

        self._trainer = trainer
        self._module = module
        self._callbacks = callbacks
        self._module_base = Module
        self._by_hook: dict[str, list[Callback]] = {}
        self._module_overrides: dict[str, bool] = {}

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
