"""The optimizer hooks with Lightning 1.x's ``optimizer_idx`` signatures, called with 1.x's arguments.

Lightning 1.x passed the index of the optimizer in turn to every optimizer hook; 2.0 dropped it.
A ported program still declares it, and 2.x's call would miss an argument mid-fit. Each such hook
is read once per run (``optimizer_idx_callers``, where the hook dispatcher is built) and, where it
declares ``optimizer_idx``, the dispatcher calls it through a caller that takes 2.x's arguments and
passes 1.x's (nothing is written onto the module or the callback; pytorch-lightning 1.9.5:
``loops/optimization/optimizer_loop.py``, ``plugins/precision/precision_plugin.py``,
``loops/epoch/training_epoch_loop.py``), with one deprecation line naming the 2.x signature:

- ``optimizer_step(epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure, on_tpu=False,
  using_native_amp=..., using_lbfgs=...)``: the three flags by keyword, where the hook takes them;
- ``optimizer_zero_grad(epoch, batch_idx, optimizer, optimizer_idx)``;
- ``on_before_optimizer_step(optimizer, optimizer_idx)`` (module; a callback's after trainer, module);
- ``lr_scheduler_step(scheduler, optimizer_idx, metric)``: the index of the scheduler's optimizer;
- ``configure_gradient_clipping(optimizer, optimizer_idx, gradient_clip_val, gradient_clip_algorithm)``;
- ``backward(loss, optimizer, optimizer_idx, *args)``: the optimizer in turn (``OptimizerTurn``);
  ``None, None`` from ``manual_backward``, as 1.x passed.

A hook without ``optimizer_idx`` is left as it is: nothing is looked up per step.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

from trainmesh.callbacks.base import defines_hook
from trainmesh.trainer.hook_arguments import static_attribute
from trainmesh.utilities.rank_zero import rank_zero_deprecation

# hook -> (the position of optimizer_idx among 1.x's arguments, the 2.x signature to name)
MODULE_HOOKS: dict[str, tuple[int, str]] = {
    "optimizer_step": (3, "optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)"),
    "optimizer_zero_grad": (3, "optimizer_zero_grad(epoch, batch_idx, optimizer)"),
    "on_before_optimizer_step": (1, "on_before_optimizer_step(optimizer)"),
    "lr_scheduler_step": (1, "lr_scheduler_step(scheduler, metric)"),
    "configure_gradient_clipping": (
        1,
        "configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)",
    ),
    "backward": (1, "backward(loss, *args, **kwargs)"),
}
CALLBACK_HOOKS: dict[str, tuple[int, str]] = {
    "on_before_optimizer_step": (3, "on_before_optimizer_step(trainer, pl_module, optimizer)"),
}
_STEP_FLAGS = ("on_tpu", "using_native_amp", "using_lbfgs")


class OptimizerTurn:
    """The run's optimizers and the one whose turn it is (what 1.x's hooks got as ``optimizer_idx``).
    The loop sets ``optimizers`` each epoch and ``current`` where it steps several in turn."""

    def __init__(self) -> None:
        self.optimizers: list[Any] = []  # the torch optimizers, in configure_optimizers' order
        self.current: tuple[Any, int] | None = None  # (optimizer, index); None: manual_backward's
        self.native_amp = False  # 1.x's using_native_amp: a mixed precision with a grad scaler or autocast
        self.announced = False  # optimizer_turns' deprecation line, once per run

    def index_of(self, optimizer: Any) -> int:
        inner = getattr(optimizer, "optimizer", optimizer)  # a HookedOptimizer, a runtime wrapper
        for index, known in enumerate(self.optimizers):
            if known is inner or known is optimizer:
                return index
        return self.current[1] if self.current is not None else 0

    def index_of_scheduler(self, scheduler: Any) -> int:
        return self.index_of(getattr(scheduler, "optimizer", None))


@functools.lru_cache(maxsize=4096)  # read once per function: a class's hook is shared by its instances and runs
def declares_optimizer_idx(function: Any) -> bool:
    """Whether ``function`` (a method as defined on its class) names an ``optimizer_idx`` parameter."""
    try:
        return "optimizer_idx" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def optimizer_idx_callers(module: Any, callbacks: list[Any], turn: OptimizerTurn) -> dict[tuple[int, str], Any]:
    """``(id(owner), hook) -> caller`` for each optimizer hook that declares ``optimizer_idx``, read once
    per run (the hook dispatcher calls through it, ``caller(method, *args)``, with 1.x's arguments)."""
    found: dict[tuple[int, str], Any] = {}
    for hook, (position, instead) in MODULE_HOOKS.items():
        function = static_attribute(type(module), hook)
        if inspect.isfunction(function) and hook not in vars(module) and declares_optimizer_idx(function):
            _deprecation(type(module).__name__, hook, instead)
            found[(id(module), hook)] = _caller(hook, function, turn, position)
    for callback in callbacks:
        for hook, (position, instead) in CALLBACK_HOOKS.items():
            function = static_attribute(type(callback), hook)
            if defines_hook(callback, hook) and inspect.isfunction(function) and declares_optimizer_idx(function):
                _deprecation(type(callback).__name__, hook, instead)
                found[(id(callback), hook)] = WithIndex(turn, position)
    return found


def _caller(hook: str, function: Any, turn: OptimizerTurn, position: int) -> Any:
    if hook == "optimizer_step":
        return OptimizerStep(function, turn)
    if hook == "backward":
        return Backward(turn)
    if hook == "lr_scheduler_step":
        return SchedulerStep(turn)
    return WithIndex(turn, position)


class WithIndex:
    """``method(*args)`` with the index of the optimizer just before ``position``'s argument inserted
    after it: (optimizer) -> (optimizer, optimizer_idx)."""

    def __init__(self, turn: OptimizerTurn, position: int) -> None:
        self.turn, self.position = turn, position

    def __call__(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        at = self.position
        index = self.turn.index_of(args[at - 1])
        return method(*args[:at], index, *args[at:], **kwargs)


class OptimizerStep:
    """``optimizer_step(epoch, batch_idx, optimizer, closure)`` called as 1.x's."""

    def __init__(self, function: Any, turn: OptimizerTurn) -> None:
        self.turn = turn
        parameters = inspect.signature(function).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        self.flags = tuple(flag for flag in _STEP_FLAGS if takes_any or flag in parameters)

    def __call__(self, method: Any, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> Any:
        values = {
            "on_tpu": False,
            "using_native_amp": self.turn.native_amp,
            "using_lbfgs": isinstance(getattr(optimizer, "optimizer", optimizer), torch.optim.LBFGS),
        }
        flags = {flag: values[flag] for flag in self.flags}
        index = self.turn.index_of(optimizer)
        return method(epoch, batch_idx, optimizer, index, optimizer_closure, **flags)


class Backward:
    """``backward(loss, *args)`` called as 1.x's ``backward(loss, optimizer, optimizer_idx, *args)``."""

    def __init__(self, turn: OptimizerTurn) -> None:
        self.turn = turn

    def __call__(self, method: Any, loss: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        optimizer, index = self.turn.current if self.turn.current is not None else (None, None)
        return method(loss, optimizer, index, *args, **kwargs)


class SchedulerStep:
    """``lr_scheduler_step(scheduler, metric)`` called as 1.x's ``(scheduler, optimizer_idx, metric)``."""

    def __init__(self, turn: OptimizerTurn) -> None:
        self.turn = turn

    def __call__(self, method: Any, scheduler: Any, metric: Any) -> Any:
        return method(scheduler, self.turn.index_of_scheduler(scheduler), metric)


def _deprecation(owner: str, hook: str, instead: str) -> None:
    rank_zero_deprecation(
        f"{owner}.{hook} declares optimizer_idx, Lightning 1.x's signature (removed in Lightning 2.0); trainmesh "
        f"calls it with 1.x's arguments. Use {instead} instead (several optimizers: manual optimization, "
        "self.automatic_optimization = False)",
        stacklevel=3,
    )
