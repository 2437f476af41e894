"""Calls a hook on the callbacks that define it and on the module, in Lightning's order
(``HookDispatcher``), and fits batch hooks that take fewer arguments (``fit_hook_arities``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from trainmesh.callbacks.base import defines_hook, overrides
from trainmesh.module import Module
from trainmesh.trainer.lightning1.legacy_hooks import (
    LEGACY_CALLBACK_STATES,
    LegacyQueue,
    call_dataloader_hook,
    call_datamodule_hook,
    call_init_hook,
    warn_legacy_datamodule_hooks,
    warn_legacy_hooks,
    warn_returned_callback_state,
)
from trainmesh.trainer.lightning1.optimizer_hooks import OptimizerTurn, adapt_optimizer_idx_hooks
from trainmesh.trainer.unsupported_hooks import refuse_uncalled_hooks
from trainmesh.trainer_view import TrainerView

# Lightning 1.x's other hooks are called where 1.x called them by the loop's files, which reach them
# through this door (lightning1/legacy_hooks.py; docs/architecture.md rule 10).
__all__ = [
    "LEGACY_CALLBACK_STATES",
    "HookDispatcher",
    "LegacyQueue",
    "TrainBatchHooks",
    "call_dataloader_hook",
    "call_datamodule_hook",
    "call_init_hook",
    "fit_hook_arities",
    "is_monitoring",
    "warn_legacy_datamodule_hooks",
    "warn_returned_callback_state",
]

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


class _WithDataloaderIdx:
    """Calls ``function(owner, *args, 0)``: a train-batch hook written for Lightning before 1.5,
    whose ``dataloader_idx`` had no default (1.x passed 0: training reads one loader)."""

    def __init__(self, function: Any, owner: Any) -> None:
        self.function, self.owner = function, owner

    def __call__(self, *args: Any) -> Any:
        return self.function(self.owner, *args, 0)


# The train-batch hooks Lightning before 1.5 called with a trailing dataloader_idx.
_OLD_DATALOADER_IDX = ("on_train_batch_start", "on_train_batch_end")


def _requires_dataloader_idx(method: Any, count: int) -> bool:
    """Whether ``method``'s positional parameter after the ``count`` passed ones (and self) is a
    ``dataloader_idx`` without a default, and the last it requires."""
    try:
        parameters = [
            p
            for p in inspect.signature(method).parameters.values()
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return False
    extra = parameters[count + 1 :]
    return len(extra) == 1 and extra[0].name == "dataloader_idx" and extra[0].default is inspect.Parameter.empty


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
        elif hook in _OLD_DATALOADER_IDX and _requires_dataloader_idx(function, leading + passed):
            object.__setattr__(obj, hook, _WithDataloaderIdx(function, obj))


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
        fit_hook_arities(module)
        for callback in callbacks:
            fit_hook_arities(callback, leading=2)
        # Lightning 1.x's optimizer hooks with optimizer_idx: called with 1.x's arguments (the loop sets the turn)
        self.optimizer_turn = OptimizerTurn()
        if module is not None:
            adapt_optimizer_idx_hooks(module, callbacks, self.optimizer_turn)

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
        """The callbacks' hook, then the module's (Lightning's order); returns the module's result."""
        for callback in self.callbacks_for(hook):
            getattr(callback, hook)(self._trainer, self._module, *args)
        if self.module_overrides(hook):
            return getattr(self._module, hook)(*args)
        return None

    def bound(self, hook: str) -> tuple[Callable[..., Any], ...]:
        """``call(hook, *args)`` as callables to call in turn with ``*args`` (results ignored):
        each callback's hook with trainer and module bound, then the module's; empty where
        nobody defines it. For a hook called on every step: no lookup left per call."""
        calls: list[Callable[..., Any]] = [
            functools.partial(getattr(cb, hook), self._trainer, self._module) for cb in self.callbacks_for(hook)
        ]
        if self.module_overrides(hook):
            calls.append(getattr(self._module, hook))
        return tuple(calls)

    def call_callbacks(self, hook: str, *args: Any, monitoring: bool | None = None) -> None:
        for callback in self.callbacks_for(hook, monitoring=monitoring):
            getattr(callback, hook)(self._trainer, self._module, *args)

    def call_module(self, hook: str, *args: Any) -> Any:
        if self.module_overrides(hook):
            return getattr(self._module, hook)(*args)
        return None

    def call_exception_hooks(self, exception: BaseException, datamodule: Any) -> None:
        """The callbacks' on_exception, then the data module's (Lightning's order); on Ctrl-C the
        callbacks' on_keyboard_interrupt first (Lightning 1.x's). A hook's own error is dropped:
        the run's matters more."""
        calls: list[Callable[[], Any]] = []
        if isinstance(exception, KeyboardInterrupt):
            calls += [
                functools.partial(cb.on_keyboard_interrupt, self._trainer, self._module)
                for cb in self.callbacks_for("on_keyboard_interrupt")
            ]
        calls += [
            functools.partial(cb.on_exception, self._trainer, self._module, exception)
            for cb in self.callbacks_for("on_exception")
        ]
        on_exception = getattr(datamodule, "on_exception", None)
        if datamodule is not None and callable(on_exception):
            calls.append(functools.partial(on_exception, exception))
        for call in calls:
            try:
                call()
            except Exception:
                pass


def is_monitoring(callback: Any) -> bool:
    """Lightning's "monitoring callbacks", which run after the module at on_train_epoch_end."""
    from trainmesh.callbacks.early_stopping import EarlyStopping
    from trainmesh.callbacks.model_checkpoint import ModelCheckpoint

    return isinstance(callback, (ModelCheckpoint, EarlyStopping))


class TrainBatchHooks:
    """``on_train_batch_start`` / ``on_train_batch_end``, and Lightning 1.x's ``on_batch_start`` /
    ``on_batch_end`` around them (lightning1/legacy_hooks.py): who defines them is read once per epoch (the fit loop)."""

    def __init__(self, hooks: Any) -> None:
        self.hooks = hooks
        self.legacy_start, self.train_start = (
            hooks.overridden("on_batch_start"),
            hooks.overridden("on_train_batch_start"),
        )
        self.train_end, self.legacy_end = hooks.overridden("on_train_batch_end"), hooks.overridden("on_batch_end")
        self.at_start = self.legacy_start or self.train_start
        # What the loop calls with (output, batch, batch_idx) at every batch's end, bound once per epoch.
        self.end_calls = hooks.bound("on_train_batch_end") + ((self._legacy_end,) if self.legacy_end else ())

    def start(self, batch: Any, batch_idx: int) -> Any:
        """-1 where the module's hook returned -1 to end the epoch."""
        if self.legacy_start and self.hooks.call("on_batch_start") == -1:
            return -1
        return self.hooks.call("on_train_batch_start", batch, batch_idx) if self.train_start else None

    def _legacy_end(self, output: Any, batch: Any, batch_idx: int) -> None:
        self.hooks.call("on_batch_end")
