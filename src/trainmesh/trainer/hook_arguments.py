"""The arguments a hook is called with, built where it is called from what its signature asks for.

Lightning programs often define a batch hook with fewer arguments than the Trainer passes
(``training_step(self, batch)``), and hooks written for Lightning before 1.5 require a trailing
``dataloader_idx`` on the train-batch hooks (1.x passed 0). The hook dispatcher (hooks.py) reads
each hook's signature once (``hook_caller``: cached per function) and gets a caller,
``caller(method, *args)``, that calls the bound method with what it takes; nothing is written onto
the user's module or callback.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from trainmesh.utilities.signature_utils import is_param_in_hook_signature

# The positional arguments the Trainer passes to each batch-level hook (after trainer and
# module, for a callback). Lightning programs often define fewer (``training_step(self,
# batch)``): such a hook gets only the first ones it accepts.
PASSED_ARGS = {
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
    # Lightning 1.x's on_predict_epoch_end(results) (callbacks: (trainer, pl_module, outputs)): the predictions,
    # a list per loader; a 2.x hook takes none and is called without them
    "on_predict_epoch_end": 1,
    "on_before_backward": 1,
    "on_before_optimizer_step": 1,
    "on_before_zero_grad": 1,
}
# Hooks whose last argument only Lightning 1.x passed: given to a signature that names it, not to *args.
_NAMED_ONLY = ("on_predict_epoch_end",)
# The step hooks: Lightning 2.x passes batch_idx only where the hook's signature asks for it
# (``is_param_in_hook_signature(step, "batch_idx", min_args=2)``, its loops' ``_build_kwargs``).
_STEP_HOOKS = ("training_step", "validation_step", "test_step", "predict_step")
# The train-batch hooks Lightning before 1.5 called with a trailing dataloader_idx.
_OLD_DATALOADER_IDX = ("on_train_batch_start", "on_train_batch_end")
# The evaluation batch hooks Lightning 1.x called with dataloader_idx even for one loader (2.x: only for several).
_EVALUATION_BATCH_HOOKS = (
    "on_validation_batch_start",
    "on_test_batch_start",
    "on_predict_batch_start",
    "on_validation_batch_end",
    "on_test_batch_end",
    "on_predict_batch_end",
)


class LeadingArgs:
    """``method(*args[:count])``: a hook that accepts fewer arguments than the Trainer passes."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self, method: Any, *args: Any) -> Any:
        return method(*args[: self.count])


class WithoutBatchIdx:
    """``method(batch, *rest)``: a step hook the instance holds whose signature Lightning reads as taking
    no ``batch_idx`` (``functools.partial(self._step, stage=...)``): the batch and what follows the index."""

    def __call__(self, method: Any, *args: Any) -> Any:
        return method(args[0], *args[2:])


class WithDataloaderIdx:
    """``method(*args, 0)``: a train-batch hook written for Lightning before 1.5, whose
    ``dataloader_idx`` had no default (1.x passed 0: training reads one loader)."""

    def __call__(self, method: Any, *args: Any) -> Any:
        return method(*args, 0)


class OneLoaderIdx:
    """``method(*args, 0)`` when the call is one argument short: an evaluation batch hook written for Lightning
    1.x with a required ``dataloader_idx``, called for one loader (1.x passed 0; 2.x passes none)."""

    def __init__(self, passed: int) -> None:
        self.passed = passed

    def __call__(self, method: Any, *args: Any) -> Any:
        return method(*args, 0) if len(args) == self.passed - 1 else method(*args)


def class_function(obj: Any, hook: str) -> Any:
    """The plain function ``hook`` is on ``obj``'s class, where it is one and the instance does not
    hold its own (a staticmethod, a partial, a builtin or an instance attribute: None, called as is)."""
    function = static_attribute(type(obj), hook)
    if not inspect.isfunction(function) or hook in vars(obj):
        return None
    return function


def static_attribute(cls: type, name: str) -> Any:
    """``inspect.getattr_static(cls, name, None)``, looked up once per class: a fit asks it of the
    same classes for dozens of hooks (its MRO walk was ~200 Python calls of a fit's fixed cost).
    The key holds what plain ``getattr`` finds, so a class whose attribute is replaced is looked up anew.

    >>> class M:
    ...     @staticmethod
    ...     def hook(): ...
    >>> type(static_attribute(M, "hook")).__name__
    'staticmethod'
    """
    found = getattr(cls, name, None)
    try:
        return _static_attribute(cls, name, found)
    except TypeError:  # an unhashable attribute: looked up as is
        return inspect.getattr_static(cls, name, None)


@functools.lru_cache(maxsize=4096)
def _static_attribute(cls: type, name: str, found: Any) -> Any:
    return inspect.getattr_static(cls, name, None)


def hook_caller(obj: Any, hook: str, *, leading: int = 0) -> Any:
    """How to call ``obj``'s ``hook`` with the Trainer's arguments (``leading``: those passed before the
    hook's own, trainer and module for a callback): a caller, or None where it takes them all.

    >>> class M:
    ...     def training_step(self, batch):
    ...         return batch
    >>> m = M(); hook_caller(m, "training_step")(m.training_step, "b", 0)
    'b'
    """
    passed = PASSED_ARGS.get(hook)
    if passed is None:
        return None
    function = class_function(obj, hook)
    if function is None:
        return _held_caller(obj, hook, leading + passed)
    return _caller_for(function, hook, leading + passed)


def _held_caller(obj: Any, hook: str, passed: int) -> Any:
    """A hook the instance holds (``functools.partial``, a wrapper, a lambda) or a staticmethod is called with
    every argument, as Lightning calls it, except 1.x's extra one (``_NAMED_ONLY``), which Lightning 2.x never
    passes: only a signature with room for it gets it (its ``__wrapped__``'s, where it wraps a bound method)."""
    held = getattr(obj, hook, None)
    if hook in _STEP_HOOKS:
        return _held_step_caller(held)
    if hook not in _NAMED_ONLY:
        return None
    # uncached: a held callable is the instance's own (the cache would keep it alive, and it may not hash)
    capacity = positional_capacity.__wrapped__(held) if callable(held) else None
    if capacity is not None and capacity >= passed:
        return None
    return LeadingArgs(passed - 1 if capacity is None else min(capacity, passed - 1))


def _held_step_caller(held: Any) -> Any:
    """Lightning reads a held step hook's signature as a method's (its first parameter skipped): without a
    ``batch_idx``, ``*args`` or two parameters after the first, the index is not passed."""
    try:
        takes_index = is_param_in_hook_signature(held, "batch_idx", min_args=2)
    except TypeError:  # a callable inspect cannot read (a builtin): called with every argument
        return None
    return None if takes_index else WithoutBatchIdx()


@functools.lru_cache(maxsize=4096)
def _caller_for(function: Any, hook: str, passed: int) -> Any:
    """Read once per function (a class's hook is shared by all its instances and runs)."""
    capacity = positional_capacity(function)
    if capacity is None and hook in _NAMED_ONLY:  # *args: Lightning 2.x's call, without 1.x's extra argument
        return LeadingArgs(passed - 1)
    if capacity is not None and capacity - 1 < passed:  # - 1: self
        return LeadingArgs(capacity - 1)
    if hook in _OLD_DATALOADER_IDX and _requires_dataloader_idx(function, passed):
        return WithDataloaderIdx()
    if hook in _EVALUATION_BATCH_HOOKS and _requires_dataloader_idx(function, passed - 1):
        return OneLoaderIdx(passed)
    return None


def _requires_dataloader_idx(function: Any, count: int) -> bool:
    """Whether ``function``'s positional parameter after the ``count`` passed ones (and self) is a
    ``dataloader_idx`` without a default, and the last it requires."""
    try:
        parameters = [
            p
            for p in inspect.signature(function).parameters.values()
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return False
    extra = parameters[count + 1 :]
    return len(extra) == 1 and extra[0].name == "dataloader_idx" and extra[0].default is inspect.Parameter.empty


@functools.lru_cache(maxsize=4096)
def positional_capacity(function: Any) -> int | None:
    """How many positional arguments ``function`` takes; None: any number (``*args``) or unknown."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: call it as is
        return None
    count = 0
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return None
        if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            count += 1
    return count
