"""Manual optimization: a module with ``automatic_optimization = False`` steps its optimizers itself.

GANs and RL programs written for Lightning call ``self.optimizers()``, ``self.manual_backward``,
``opt.step()``, ``self.toggle_optimizer`` inside ``training_step``. The loop then runs no
backward and no optimizer step; what it still owns goes through here, so that a step the user
writes takes the same route as the loop's own: backward through the precision (loss scaling)
and the strategy (DDP's reducer), ``opt.step()`` through the precision's scaler and the
strategy's optimizer (zero1), clipping through the strategy's (global norm under fsdp).

>>> class GAN(Module):                           # doctest: +SKIP
...     def __init__(self):
...         super().__init__()
...         self.automatic_optimization = False
...     def training_step(self, batch, batch_idx):
...         opt_g, opt_d = self.optimizers()
...         self.toggle_optimizer(opt_g)
...         self.manual_backward(g_loss)
...         opt_g.step(); opt_g.zero_grad()
...         self.untoggle_optimizer(opt_g)
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from trainmesh.manual_calls import ManualBackward, sync_in
from trainmesh.strategies.step import ManualSync, StepHooks
from trainmesh.trainer.optimization.progress import count_optimizer_steps
from trainmesh.trainer.optimization_hooks import call_before_optimizer_step, then_hooks
from trainmesh.trainer.token_loss import refuse_manual_tokens
from trainmesh.trainer_view import RuntimeView
from trainmesh.utilities.exceptions import MisconfiguredType, MisconfiguredValue
from trainmesh.utilities.wrapped_objects import sharing_state, slot_method

if TYPE_CHECKING:
    from trainmesh.trainer.settings import LoopSettings


class StepCount(Protocol):
    """The part of the loop state a manual ``opt.step()`` touches (loop_state.LoopState; not
    imported: the Module imports this module, and the state's types lead back to the Module)."""

    global_step: int
    progress: Any  # loop_progress.LoopCounters (its epoch_steps)
    hooks: Any
    optimizers: list[Any]
    manual_backward: Any


# Where manual optimization is checked against plain torch (each has a parity test,
# tests/trainer/test_manual_optimization*.py): the strategies that state it in their capabilities.
CHECKED_UNDER = (
    "single, ddp, zero1, sharded, fsdp, hsdp, tp, fsdp_tp, layers_on_devices, and dp and ddp2 where their chunks "
    "run in turn (CPU)"
)


def is_manual(module: Any) -> bool:
    return getattr(module, "automatic_optimization", True) is False


def check_manual_settings(strategy: str, capabilities: Any, settings: LoopSettings, module: Any) -> None:
    """Refuse the loop's own accumulation and clipping (in manual mode the loop never steps), and
    the strategies that cannot run manual optimization (``capabilities``: the strategy's
    ``StrategyCapabilities``, which says why)."""
    name = type(module).__name__
    if not capabilities.manual_optimization:
        why = capabilities.manual_optimization_refusal or (
            f"manual optimization is checked against plain torch only under {CHECKED_UNDER}, so this strategy "
            "could train wrong weights. Use one of those, or return the loss from training_step (automatic "
            "optimization works under every strategy)"
        )
        raise ValueError(f"strategy {strategy!r} with {name}.automatic_optimization = False: {why}")
    if settings.accumulate_grad_batches != 1:  # (Lightning's class for both: MisconfigurationException)
        raise MisconfiguredValue(
            "Automatic gradient accumulation is not supported for manual optimization (Lightning's words): "
            f"Trainer(accumulate_grad_batches={settings.accumulate_grad_batches}) with {name}.automatic_optimization "
            "= False: the loop makes no optimizer step in manual optimization, so it cannot accumulate. Drop the "
            "argument and accumulate in training_step: call opt.step() and opt.zero_grad() every N batches "
            "(wrap the other batches' manual_backward in `with self.no_backward_sync():` to skip the gradient sync)"
        )
    if settings.clips:
        raise MisconfiguredValue(
            "Automatic gradient clipping is not supported for manual optimization (Lightning's words): "
            f"Trainer(gradient_clip_val={settings.gradient_clip_val}) with {name}.automatic_optimization = False: "
            "the loop makes no optimizer step in manual optimization, so it has nowhere to clip. Drop the argument "
            "and call self.clip_gradients(opt, gradient_clip_val=..., gradient_clip_algorithm='norm') in "
            "training_step before opt.step()"
        )


def _no_backward(loss: torch.Tensor | None) -> None:
    return None  # the module ran its backward calls itself


def manual_step_hooks(hooks: StepHooks, manual: ManualBackward, module: Any) -> StepHooks:
    """The loop's step hooks for a manual module: the returned value is only read (a loss to
    log and report, or None), never backpropagated."""

    def loss_or_none(output: Any) -> torch.Tensor | None:
        loss = output.get("loss") if isinstance(output, dict) else output
        if loss is not None and not isinstance(loss, torch.Tensor):
            # Lightning's ManualResult refuses it with MisconfigurationException in these words; caught
            # as TypeError too (trainmesh's type before).
            raise MisconfiguredType(
                "In manual optimization, `training_step` must either return a Tensor or have no return. "
                f"{type(module).__name__}.training_step returned {type(loss).__name__}: return None, a loss "
                "tensor, or a dict with 'loss'"
            )
        return loss.detach() if loss is not None else None

    def no_token_count(output: Any) -> None:
        refuse_manual_tokens(output, type(module).__name__)

    # A None loss passes through the strategy's step untouched: no check, no backward, divisor 1.
    return StepHooks(
        step_end=hooks.step_end,
        loss_of=cast(Callable[[Any], torch.Tensor], loss_or_none),
        count_of=no_token_count,
        backward=_no_backward,
        chunk_scope=hooks.chunk_scope,
        backward_scope=manual.scope,
        call=hooks.call,
    )


class ManualSteps:
    """What ``Module.optimizers()`` wraps each optimizer with (``trainer.manual_steps``): its
    ``step()`` calls the hooks and counts in the loop state's ``global_step``."""

    def __init__(self, state: StepCount, runtime: RuntimeView) -> None:
        self.state, self.runtime = state, runtime
        self._wrapped: dict[int, ManualOptimizer] = {}  # one per optimizer, as Lightning hands out the same one

    def wrap(self, optimizer: Any) -> ManualOptimizer:
        wrapped = self._wrapped.get(id(optimizer))
        if wrapped is None:  # (it holds the optimizer: the id stays its)
            wrapped = self._wrapped[id(optimizer)] = ManualOptimizer.of(optimizer, self)
        return wrapped

    def wrap_all(self) -> list[ManualOptimizer]:
        """Every optimizer of the run (``LoopState.optimizers``, the runtime's), wrapped."""
        return [self.wrap(optimizer) for optimizer in self.state.optimizers]

    def unwrap(self, optimizer: Any) -> Any:
        """The runtime's optimizer behind what ``wrap`` handed out (anything else as it is)."""
        return optimizer._tm_runtime if isinstance(optimizer, ManualOptimizer) else optimizer


class ManualOptimizer:
    """What ``self.optimizers()`` hands out: ``step()`` through the runtime (the precision's grad
    scaler; zero1's sharded optimizer), counted in ``trainer.global_step`` as Lightning counts
    manual steps. It is the user's optimizer to anyone who asks, as Lightning's
    ``LightningOptimizer``: a subclass of its class sharing its ``__dict__``
    (utilities/wrapped_objects.py). Made by ``ManualOptimizer.of(runtime_optimizer, steps)``."""

    __slots__ = ("_tm_runtime", "_steps", "_tm_step", "_tm_zero_grad")
    step = slot_method("_tm_step")
    zero_grad = slot_method("_tm_zero_grad")
    _tm_joined_name = "Lightning{}"  # Lightning's LightningOptimizer's class name ("LightningAdam"), its repr's too

    _tm_runtime: Any  # the runtime's wrapper (runtime_optimizer.RuntimeOptimizer)
    _steps: ManualSteps
    _tm_step: Callable[..., Any]
    _tm_zero_grad: Callable[..., None]

    @classmethod
    def of(cls, optimizer: Any, steps: ManualSteps) -> ManualOptimizer:
        made = sharing_state(cls, optimizer.optimizer)
        made._tm_runtime, made._steps = optimizer, steps
        made._tm_step = types.MethodType(cls._manual_step, made)
        made._tm_zero_grad = types.MethodType(cls._zero_grad, made)
        return made

    @property
    def optimizer(self) -> Any:
        """The optimizer ``configure_optimizers`` returned, as Lightning's ``LightningOptimizer.optimizer``."""
        return self._tm_runtime.optimizer

    def _manual_step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        # kwargs: the program's own arguments to step() besides the closure, passed on as Lightning's are
        step = functools.partial(self._tm_counted_step, **kwargs) if kwargs else self._tm_counted_step
        return self._tm_sync().step(step, closure, what=f"{self._tm_name()}.step()")

    def _tm_counted_step(self, closure: Callable[[], Any] | None, **kwargs: Any) -> Any:
        state, runtime = self._steps.state, self._steps.runtime
        if state.hooks is not None and state.hooks.overridden("on_before_optimizer_step"):
            announce = functools.partial(call_before_optimizer_step, state.hooks, runtime, self.optimizer)
            if closure is None:
                announce()
            else:  # as in Lightning: once the closure has run its backward
                closure = then_hooks(closure, announce)
        result = self._tm_runtime.step(closure, **kwargs)
        count_optimizer_steps(state)  # the one place global_step grows (optimization/progress.py)
        return result

    def _zero_grad(self, set_to_none: bool = True) -> None:
        self._tm_sync().once(
            lambda: self._tm_runtime.zero_grad(set_to_none=set_to_none), what=f"{self._tm_name()}.zero_grad()"
        )

    # Its own methods are named _tm_*: a plain method is found after the shared __dict__, so a name
    # the user's optimizer keeps there (``_step``, say) would hide it.
    def _tm_sync(self) -> ManualSync:
        return sync_in(self._steps.state.manual_backward)

    def _tm_name(self) -> str:
        """The optimizer, as a call that chunks of a step disagree on names it: "optimizer 1 (Adam)"."""
        index = next((i for i, o in enumerate(self._steps.state.optimizers) if o is self._tm_runtime), 0)
        return f"optimizer {index} ({type(self.optimizer).__name__})"

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Pickled and copied as what it wraps, wrapped again (its class is made at run time: not importable)
        return (ManualOptimizer.of, (self._tm_runtime, self._steps))
