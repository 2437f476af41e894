"""Calls a hook on the callbacks that define it and on the module, in Lightning's order
(``HookDispatcher``), each with the arguments its signature asks for (hook_arguments.py; Lightning
1.x's ``optimizer_idx`` signatures: lightning1/optimizer_hooks.py), built at the call site."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from trainmesh.callbacks.base import HOOK_NAMES, Callback, defines_hook, overrides
from trainmesh.module import Module
from trainmesh.trainer.hook_arguments import PASSED_ARGS, hook_caller
from trainmesh.trainer.lightning1.legacy_hooks import CALLBACK_HOOKS as LIGHTNING1_CALLBACK_HOOKS
from trainmesh.trainer.lightning1.legacy_hooks import (
    refuse_epoch_end_outputs,
    warn_legacy_datamodule_hooks,
    warn_legacy_hooks,
    warn_returned_callback_state,
)
from trainmesh.trainer.lightning1.optimizer_hooks import OptimizerTurn, optimizer_idx_callers
from trainmesh.trainer.lightning1.step_end import step_end_hook
from trainmesh.trainer.unsupported_hooks import CALLBACK_HOOKS as REFUSED_CALLBACK_HOOKS
from trainmesh.trainer.unsupported_hooks import refuse_uncalled_hooks
from trainmesh.trainer_view import TrainerView
from trainmesh.utilities.lazy import is_instance
from trainmesh.utilities.model_helpers import is_overridden

# Lightning 1.x's removed hooks are warned about, not called (lightning1/legacy_hooks.py); the loop's
# files reach the 1.x room through this door (docs/architecture.md rule 10).
__all__ = [
    "HookDispatcher",
    "TrainBatchHooks",
    "is_callback",
    "is_monitoring",
    "warn_legacy_datamodule_hooks",
    "warn_returned_callback_state",
]


class HookDispatcher:
    """Calls a hook on the callbacks that define it and on the module, in Lightning 2.x's order.

    Lightning's rule (``trainer/call.py`` and its loops), which ``call`` follows: the callbacks
    first, in their list's order, then the module. One exception: at ``on_train_epoch_end`` the
    callbacks that decide from metrics (ModelCheckpoint, EarlyStopping: Lightning's "monitoring
    callbacks") run after the module, so they see what it logged there; the fit loop calls
    ``call_callbacks(..., monitoring=False)``, the module, then ``monitoring=True``. ``setup`` and
    ``teardown`` run on the data module, the callbacks, then the module (the Trainer calls them).

    Which callbacks define which hook is worked out once per run, so a hook nobody defines costs
    one dict lookup in the training step.
    """

    def __init__(self, trainer: TrainerView, module: Any, callbacks: list[Any]) -> None:
        self._trainer = trainer
        self._module = module
        self._callbacks = callbacks
        self._module_base = Module
        self._by_hook: dict[tuple[str, bool | None], list[Any]] = {}
        self._module_overrides: dict[str, bool] = {}
        refuse_uncalled_hooks(module, callbacks)  # before anything runs: setup is the stage's first hook
        warn_legacy_hooks(self)
        # How each hook is called, read once per run from its signature: (id(owner), hook) -> the bound method
        # through its caller where it takes other arguments than the Trainer passes; nothing is set on the owner.
        self._callers: dict[tuple[int, str], Any] = {}
        for owner, leading in ((module, 0), *((callback, 2) for callback in callbacks)):
            for hook in PASSED_ARGS if owner is not None else ():
                caller = hook_caller(owner, hook, leading=leading)
                if caller is not None:
                    self._callers[(id(owner), hook)] = caller
        # Lightning 1.x's optimizer hooks with optimizer_idx: called with 1.x's arguments (the loop sets the turn)
        self.optimizer_turn = OptimizerTurn()
        if module is not None:
            self._callers.update(optimizer_idx_callers(module, callbacks, self.optimizer_turn))

    def method(self, owner: Any, hook: str) -> Callable[..., Any]:
        """``owner.<hook>`` (the module or a callback) as a callable taking the Trainer's arguments, which
        calls it with those its signature asks for."""
        method = getattr(owner, hook)
        caller = self._callers.get((id(owner), hook)) if self._callers else None
        return method if caller is None else functools.partial(caller, method)

    def module_method(self, hook: str) -> Callable[..., Any]:
        """The module's ``hook`` as ``method`` gives it (its own or the base class's default)."""
        return self.method(self._module, hook)

    def module_hook(self, hook: str) -> Callable[..., Any]:
        """The module's ``hook`` as ``module_method`` gives it, run as that hook (the log collector's
        ``fx``): what it logs is checked as Lightning's fx validator checks that hook's."""
        method = self.module_method(hook)

        def run(*args: Any, **kwargs: Any) -> Any:
            collector = getattr(self._module, "_log_collector", None)
            outer = None if collector is None else collector.fx
            if collector is not None:
                collector.fx = hook
            try:
                return method(*args, **kwargs)
            finally:
                if collector is not None:
                    collector.fx = outer

        return run

    def step_caller(self, hook: str) -> Callable[..., Any] | None:
        """How the strategy calls the module's step hook (``StepHooks.call``); None: with every argument."""
        caller: Callable[..., Any] | None = self._callers.get((id(self._module), hook))
        return caller

    def refuse_lightning1_epoch_end_outputs(self) -> None:
        """At fit's start: an on_train_epoch_end requiring 1.x's ``outputs`` (lightning1/legacy_hooks.py)."""
        refuse_epoch_end_outputs(self._module, self._callbacks)

    def step_end(self, hook: str) -> Callable[[Any], Any] | None:
        """The module's 1.x ``*_step_end`` hook where it overrides it (its None meaning the step's own
        output, as in 1.x: lightning1/step_end.py); None where it does not."""
        return step_end_hook(self._module, hook) if self.module_overrides(hook) else None

    @property
    def module(self) -> Any:
        return self._module

    def callbacks_for(self, hook: str, *, monitoring: bool | None = None) -> list[Any]:
        """The callbacks that define ``hook``; with ``monitoring`` True or False, only the
        monitoring ones (ModelCheckpoint, EarlyStopping) or only the others."""
        found = self._by_hook.get((hook, monitoring))
        if found is None:
            found = [
                cb
                for cb in self._callbacks
                if defines_hook(cb, hook) and (monitoring is None or is_monitoring(cb) == monitoring)
            ]
            self._by_hook[(hook, monitoring)] = found
        return found

    def module_overrides(self, hook: str) -> bool:
        """Whether to call the module's ``hook``: its class overrides it, or a callable is set on the
        module itself (``model.on_fit_start = fn``, a wrapper around the default: Lightning calls
        ``getattr(module, hook)`` for every hook, so it runs)."""
        found = self._module_overrides.get(hook)
        if found is None:
            own = getattr(self._module, "__dict__", {})
            if hook in own:  # set on the module itself: called where callable (None: not, as Lightning)
                found = callable(own[hook])
            else:
                found = hasattr(self._module, hook) and (
                    not isinstance(self._module, self._module_base) or overrides(self._module, hook, self._module_base)
                )
            self._module_overrides[hook] = found
        return found

    def module_replaces(self, hook: str) -> bool:
        """Lightning's ``is_overridden(hook, module)``, for what decides the run (is there a validation
        step, which configure hook builds the layers): a wrapper set on the module around the default
        does not count, as it does not in Lightning; ``module_overrides`` says whether to call it."""
        if not isinstance(self._module, self._module_base):
            return self.module_overrides(hook)
        return is_overridden(hook, self._module, self._module_base)

    def overridden(self, hook: str) -> bool:
        """Whether the module or any callback overrides ``hook``."""
        return bool(self.callbacks_for(hook)) or self.module_overrides(hook)

    def call(self, hook: str, *args: Any) -> Any:
        """The callbacks' hook, then the module's (Lightning's order); returns the module's result.
        What they log is the hook's own metric (the log collector's ``fx``), as Lightning keeps it."""
        collector = getattr(self._module, "_log_collector", None)
        outer = None if collector is None else collector.fx
        if collector is not None:
            collector.fx = hook
        try:
            for callback in self.callbacks_for(hook):
                self.method(callback, hook)(self._trainer, self._module, *args)
            if self.module_overrides(hook):
                return self.method(self._module, hook)(*args)
            return None
        finally:
            if collector is not None:
                collector.fx = outer

    def bound(self, hook: str) -> tuple[Callable[..., Any], ...]:
        """``call(hook, *args)`` as callables to call in turn with ``*args`` (results ignored):
        each callback's hook with trainer and module bound, then the module's; empty where
        nobody defines it. For a hook called on every step: no lookup left per call."""
        calls: list[Callable[..., Any]] = [
            functools.partial(self.method(cb, hook), self._trainer, self._module) for cb in self.callbacks_for(hook)
        ]
        if self.module_overrides(hook):
            calls.append(self.method(self._module, hook))
        return tuple(calls)

    def call_callbacks(self, hook: str, *args: Any, monitoring: bool | None = None, **kwargs: Any) -> None:
        for callback in self.callbacks_for(hook, monitoring=monitoring):
            self.method(callback, hook)(self._trainer, self._module, *args, **kwargs)

    def call_module(self, hook: str, *args: Any, **kwargs: Any) -> Any:
        if self.module_overrides(hook):
            return self.method(self._module, hook)(*args, **kwargs)
        return None

    def call_exception_hooks(self, exception: BaseException, datamodule: Any) -> None:
        """The callbacks' on_exception, then the data module's (Lightning's order). A hook's own error
        propagates, the run's its context, and the later hooks are not called (Lightning's ``_interrupt``)."""
        for callback in self.callbacks_for("on_exception"):
            callback.on_exception(self._trainer, self._module, exception)
        on_exception = getattr(datamodule, "on_exception", None)
        if datamodule is not None and callable(on_exception):
            on_exception(exception)


def is_callback(obj: Any) -> bool:
    """A trainmesh Callback, or a callback written for Lightning by another library (Optuna's pruning
    callback subclasses lightning.pytorch.Callback): an object with any callback hook the dispatcher
    knows (Lightning 2.x's, 1.x's, those it refuses), taken by them (duck typing); the Trainer calls
    only the hooks it defines."""
    return isinstance(obj, Callback) or _class_is_callback_like(type(obj))  # type: ignore[arg-type]  # classes hash


# Every callback hook the dispatcher knows (Lightning 2.x's, 1.x's, those it refuses).
_KNOWN_CALLBACK_HOOKS = HOOK_NAMES | LIGHTNING1_CALLBACK_HOOKS.keys() | REFUSED_CALLBACK_HOOKS.keys()


@functools.lru_cache(maxsize=1024)
def _class_is_callback_like(cls: type) -> bool:
    """Asked once per class: each Trainer asks it of its callbacks argument (a list: ~50 names
    looked up on ``list`` per Trainer otherwise)."""
    return any(callable(getattr(cls, name, None)) for name in _KNOWN_CALLBACK_HOOKS)


def is_monitoring(callback: Any) -> bool:
    """Lightning's "monitoring callbacks", which run after the module at on_train_epoch_end."""
    # Without importing either module where no such callback was ever made (utilities/lazy.py).
    return is_instance(callback, "trainmesh.callbacks.model_checkpoint", "ModelCheckpoint") or is_instance(
        callback, "trainmesh.callbacks.early_stopping", "EarlyStopping"
    )


class TrainBatchHooks:
    """``on_train_batch_start`` / ``on_train_batch_end``: who defines them is read once per epoch (the fit loop)."""

    def __init__(self, hooks: Any) -> None:
        self.hooks = hooks
        self.train_start = hooks.overridden("on_train_batch_start")
        self.train_end = hooks.overridden("on_train_batch_end")
        self.at_start = self.train_start
        # What the loop calls with (output, batch, batch_idx) at every batch's end, bound once per epoch.
        self.end_calls = hooks.bound("on_train_batch_end")

    def start(self, batch: Any, batch_idx: int) -> Any:
        """-1 where the module's hook returned -1 to end the epoch."""
        return self.hooks.call("on_train_batch_start", batch, batch_idx) if self.train_start else None
