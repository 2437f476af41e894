"""The optimizer a Runtime hands back from ``setup``: its ``step`` goes through the run's precision."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import torch.optim.optimizer as torch_optimizer  # (torch.optim deletes its name for the submodule)

from trainmesh.strategies.capabilities import WHOLE, MemoryModel
from trainmesh.utilities.wrapped_objects import sharing_state, slot_method


class _StepsOptimizers(Protocol):
    """The run's precision, as its optimizers see it (named by what they use, so no import
    cycle): called directly rather than through ``Runtime.optimizer_step``, one call fewer a step."""

    scaler: Any  # torch.amp.GradScaler under 16-mixed; None: the optimizer's own step is the step

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None, **kwargs: Any
    ) -> Any: ...


class RuntimeOptimizer:
    """An optimizer whose ``step()`` goes through the precision's loss scaler.

    It is the user's optimizer to anyone who asks, as Lightning's ``LightningOptimizer`` is: its
    class subclasses the user's (``isinstance(opt, torch.optim.Adam)`` holds) and it shares the
    user's ``__dict__`` (``param_groups``, ``state``, a custom optimizer's fields: read and written
    on the user's optimizer; utilities/wrapped_objects.py). ``zero_grad`` is the optimizer's own.
    Made by ``RuntimeOptimizer.of(optimizer, precision)``.
    """

    __slots__ = ("optimizer", "_precision", "_plain", "_bare", "_tm_step", "_tm_zero_grad")
    step = slot_method("_tm_step")
    # The optimizer's own, bound: the loop calls it after every step, no wrapper call between.
    zero_grad = slot_method("_tm_zero_grad")

    optimizer: torch.optim.Optimizer
    _precision: _StepsOptimizers
    _plain: bool
    _bare: bool  # plain, and its class's step is torch's own that calls a closure once (step_trained)
    _tm_step: Callable[..., Any]
    _tm_zero_grad: Callable[..., None]

    @classmethod
    def of(cls, optimizer: torch.optim.Optimizer, precision: _StepsOptimizers) -> RuntimeOptimizer:
        made = sharing_state(cls, optimizer)
        made.optimizer = optimizer
        made._precision = precision
        made._plain = precision.scaler is None  # no loss scaler: step() is the optimizer's own
        made._bare = made._plain and _closure_once(type(optimizer))
        made._tm_step = types.MethodType(cls._step, made)  # not made._step: the user's __dict__ could hide it
        made._tm_zero_grad = optimizer.zero_grad
        return made

    def _step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        # kwargs: the program's own arguments to step() besides the closure, passed on as Lightning's are
        if self._plain:  # what Precision.optimizer_step does without a scaler, one call fewer per step
            # Lightning always gives step a closure (one that does nothing where there is none)
            return self.optimizer.step(closure=_do_nothing if closure is None else closure, **kwargs)  # type: ignore[arg-type]
        return self._precision.optimizer_step(self.optimizer, closure, **kwargs)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Pickled and copied as what it wraps, wrapped again (its class is made at run time: not importable)
        return (RuntimeOptimizer.of, (self.optimizer, self._precision))

    def __repr__(self) -> str:
        return f"RuntimeOptimizer({self.optimizer!r})"


def step_trained(optimizer: RuntimeOptimizer, loss: Callable[[], Any]) -> None:
    """The optimizer step of a batch the loop trained already (training_step and backward ran;
    ``loss`` gives its loss): ``optimizer.step(closure=loss)``, as Lightning always passes a closure,
    or ``optimizer.step()`` where nothing could tell the two apart: 8 Python calls fewer a step
    (the closure and torch's ``enable_grad`` around it; benchmarks/loop_cpu.py --calls). That is where the step is torch's own for an
    optimizer whose step calls a closure once and only returns its value (every ``torch.optim`` class
    but LBFGS: the value goes nowhere here), with no loss scaler between, no step pre- or post-hook
    (global or the optimizer's: they receive the step's arguments, ``closure`` among them), and
    ``step`` not replaced on the optimizer itself (but by torch's scheduler, which passes the
    arguments on as they are)."""
    inner = optimizer.optimizer
    if (
        optimizer._bare
        and not (inner._optimizer_step_pre_hooks or inner._optimizer_step_post_hooks)
        and not (_GLOBAL_PRE_HOOKS or _GLOBAL_POST_HOOKS)
    ):
        own = inner.__dict__  # (the optimizer's attributes: `in` and [] make no call a step)
        if "step" not in own or _scheduler_s(own["step"], inner):
            inner.step()
            return
    optimizer.step(loss)


def _scheduler_s(step: Any, optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``step``, set on the optimizer itself, is torch's LRScheduler's wrapper of the class's
    step (it marks the call and passes the arguments on as they are), not a user's own."""
    return bool(getattr(step, "_wrapped_by_lr_sched", False)) and step.__wrapped__ is type(optimizer).step


# torch's global optimizer hooks (register_optimizer_step_pre_hook/post_hook); where a torch version
# keeps them elsewhere, a non-empty stand-in: every step then gets its closure.
_GLOBAL_PRE_HOOKS = getattr(torch_optimizer, "_global_optimizer_pre_hooks", (None,))
_GLOBAL_POST_HOOKS = getattr(torch_optimizer, "_global_optimizer_post_hooks", (None,))


@functools.cache
def _torch_steps() -> frozenset[Any]:
    """The step functions (unwrapped) of torch's own optimizers whose step calls its closure once,
    under ``enable_grad``, and returns its value: every ``torch.optim`` class but LBFGS (it runs the
    closure as often as its line search needs)."""
    classes = [getattr(torch.optim, name) for name in dir(torch.optim)]
    optimizers = [c for c in classes if isinstance(c, type) and issubclass(c, torch.optim.Optimizer)]
    skipped = (torch.optim.Optimizer, torch.optim.LBFGS)
    return frozenset(inspect.unwrap(c.step) for c in optimizers if c not in skipped)


def has_own_step(optimizer: Any) -> bool:
    """Whether the optimizer's class has a ``step`` of its own: a user's subclass that overrides it
    (Lightning's docs' ``LitAdam``; sharpness-aware minimisation, which calls its closure twice to
    train again at a perturbed point). Lightning runs such a step with the closure that trains, so the
    step decides when, and how often, training_step and backward run; the loop must then do the same.
    torch's own optimizers and the wrappers a strategy puts around the user's (ZeRO, torchft's) are not."""
    cls = type(inner_optimizer(optimizer))  # (the Runtime's wrapper, or the optimizer itself)
    return not _closure_once(cls) and not cls.__module__.startswith(("torch.", "torchft."))


def refuse_own_step_on_shards(optimizers: Sequence[Any], memory: MemoryModel | None, strategy: str) -> None:
    """Stop before training where the strategy gives each process's copy of the optimizer only a
    shard of whole parameters (zero1) and an optimizer's class has a step of its own: such a step
    may read or change the whole model (SAM perturbs every weight, then runs its closure again to
    train at that point; a rule over the norm of all parameters), and would see one shard per
    process, training other weights with no error. torch's own steps work per parameter."""
    if memory is None or memory.optimizer_state == WHOLE or memory.parameters != WHOLE:
        return  # (fsdp's optimizer holds a shard of every parameter, the whole model's)
    for optimizer in optimizers:
        if has_own_step(optimizer):
            name = type(inner_optimizer(optimizer)).__name__
            raise ValueError(
                f"strategy={strategy!r} cannot shard {name}'s state: its class has a step of its own, and "
                f"{strategy} gives each process's copy of the optimizer only that process's share of the "
                "parameters, so a step that reads or changes the whole model (SAM's perturbation, a norm "
                "over all parameters) would silently train other weights. Use strategy='ddp' with this "
                "optimizer, or a torch.optim optimizer with this strategy"
            )


def _closure_once(cls: type[torch.optim.Optimizer]) -> bool:
    """Whether ``cls.step`` is one of torch's own that call a closure once (a subclass overriding step is not)."""
    return inspect.unwrap(cls.step) in _torch_steps()


def _do_nothing() -> None:
    """The closure a step without one gets, as Lightning's ``do_nothing_closure``: an optimizer
    written ``def step(self, closure)`` (Lightning's docs) steps; torch's call it and get None
    (torch types the closure as returning a float, its loss: None is what Lightning's returns)."""


def inner_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer itself, whether or not the Runtime wrapped it."""
    return optimizer.optimizer if isinstance(optimizer, RuntimeOptimizer) else optimizer
