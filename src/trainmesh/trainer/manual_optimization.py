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

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from trainmesh.strategies.step import ManualSync, StepHooks
from trainmesh.trainer.optimization_hooks import call_before_optimizer_step, then_hooks
from trainmesh.trainer.token_loss import refuse_manual_tokens
from trainmesh.trainer_view import RuntimeView, TrainerView

if TYPE_CHECKING:
    from trainmesh.trainer.settings import LoopSettings


class StepCount(Protocol):
    """The part of the loop state a manual ``opt.step()`` touches (loop_state.LoopState; not
    imported: the Module imports this module, and the state's types lead back to the Module)."""

    global_step: int
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
    if settings.accumulate_grad_batches != 1:
        raise ValueError(
            f"Trainer(accumulate_grad_batches={settings.accumulate_grad_batches}) with {name}.automatic_optimization "
            "= False: the loop makes no optimizer step in manual optimization, so it cannot accumulate. Drop the "
            "argument and accumulate in training_step: call opt.step() and opt.zero_grad() every N batches "
            "(wrap the other batches' manual_backward in `with self.no_backward_sync():` to skip the gradient sync)"
        )
    if settings.gradient_clip_val is not None:
        raise ValueError(
            f"Trainer(gradient_clip_val={settings.gradient_clip_val}) with {name}.automatic_optimization = False: "
            "the loop makes no optimizer step in manual optimization, so it has nowhere to clip. Drop the argument "
            "and call self.clip_gradients(opt, gradient_clip_val=..., gradient_clip_algorithm='norm') in "
            "training_step before opt.step()"
        )


class ManualBackward:
    """``module.manual_backward(loss)``: backward through the runtime (precision loss scaling; with
    on_before_backward/on_after_backward around it where overridden: optimization_hooks.py), as
    the strategy running the step has it happen (``sync``, a ``ManualSync`` set for the step by
    ``StepHooks.backward_scope``: DDP prepares its reducer for this loss; dp's chunks backpropagate
    their losses' mean)."""

    def __init__(self, backward: Callable[..., None]) -> None:
        self._backward = backward
        self.sync = ManualSync()

    @contextlib.contextmanager
    def scope(self, sync: ManualSync) -> Iterator[None]:
        previous, self.sync = self.sync, sync
        try:
            yield
        finally:
            self.sync = previous

    def __call__(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        # backward's own arguments (retain_graph=True, ...) reach the module's backward hook
        self.sync.backward(loss, lambda reduced: self._backward(reduced, *args, **kwargs))


def sync_of(trainer: TrainerView) -> ManualSync:
    """How the running step's manual-optimization calls meet its strategy (a plain ``ManualSync``
    outside a manual step)."""
    return _sync_in(getattr(trainer, "manual_backward", None))


def _sync_in(manual: Any) -> ManualSync:
    return manual.sync if isinstance(manual, ManualBackward) else ManualSync()


def _no_backward(loss: torch.Tensor | None) -> None:
    return None  # the module ran its backward calls itself


def manual_step_hooks(hooks: StepHooks, manual: ManualBackward, module: Any) -> StepHooks:
    """The loop's step hooks for a manual module: the returned value is only read (a loss to
    log and report, or None), never backpropagated."""

    def loss_or_none(output: Any) -> torch.Tensor | None:
        loss = output.get("loss") if isinstance(output, dict) else output
        if loss is not None and not isinstance(loss, torch.Tensor):
            raise TypeError(
                f"{type(module).__name__}.training_step returned {type(loss).__name__}; with manual optimization "
                "return None, a loss tensor, or a dict with 'loss'"
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
    )


class ManualSteps:
    """What ``Module.optimizers()`` wraps each optimizer with (``trainer.manual_steps``): its
    ``step()`` calls the hooks and counts in the loop state's ``global_step``."""

    def __init__(self, state: StepCount, runtime: RuntimeView) -> None:
        self.state, self.runtime = state, runtime

    def wrap(self, optimizer: Any) -> ManualOptimizer:
        return ManualOptimizer(optimizer, self)


class ManualOptimizer:
    """What ``self.optimizers()`` hands out: ``step()`` through the runtime (the precision's grad
    scaler; zero1's sharded optimizer), counted in ``trainer.global_step`` as Lightning counts
    manual steps. Every other attribute is the optimizer's own."""

    def __init__(self, optimizer: Any, steps: ManualSteps) -> None:
        self.optimizer = optimizer  # the runtime's wrapper
        self._steps = steps

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        return self._sync().step(self._step, closure, what=f"{self._name()}.step()")

    def _step(self, closure: Callable[[], Any] | None) -> Any:
        state, runtime = self._steps.state, self._steps.runtime
        if state.hooks is not None and state.hooks.overridden("on_before_optimizer_step"):
            announce = functools.partial(call_before_optimizer_step, state.hooks, runtime, self.optimizer.optimizer)
            if closure is None:
                announce()
            else:  # as in Lightning: once the closure has run its backward
                closure = then_hooks(closure, announce)
        result = self.optimizer.step(closure)
        state.global_step += 1
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._sync().once(lambda: self.optimizer.zero_grad(set_to_none=set_to_none), what=f"{self._name()}.zero_grad()")

    def _sync(self) -> ManualSync:
        return _sync_in(self._steps.state.manual_backward)

    def _name(self) -> str:
        """The optimizer, as a call that chunks of a step disagree on names it: "optimizer 1 (Adam)"."""
        index = next((i for i, o in enumerate(self._steps.state.optimizers) if o is self.optimizer), 0)
        return f"optimizer {index} ({type(self.optimizer.optimizer).__name__})"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"ManualOptimizer({self.optimizer.optimizer!r})"


def optimizers_of(trainer: TrainerView, *, wrapped: bool) -> Any:
    """One optimizer, or a list when configure_optimizers made several (as Lightning returns)."""
    given = trainer.optimizers
    if not given:
        raise RuntimeError(
            "self.optimizers() is available once fit has called configure_optimizers (in training_step, say)"
        )
    steps = trainer.manual_steps
    found = [steps.wrap(o) if wrapped and steps is not None else o.optimizer for o in given]
    return found[0] if len(found) == 1 else found


def lr_schedulers_of(trainer: TrainerView) -> Any:
    """None, one scheduler, or a list (Lightning's forms)."""
    sync = sync_of(trainer)
    found = [
        SteppedOnce(config.scheduler, sync, what=f"lr scheduler {i}.step()") if sync.parts > 1 else config.scheduler
        for i, config in enumerate(trainer.lr_scheduler_configs)
    ]
    if not found:
        return None
    return found[0] if len(found) == 1 else found


class SteppedOnce:
    """A scheduler whose ``step()`` runs once for every part of a step that runs training_step
    (dp's chunks); anything else is the scheduler's own, ``isinstance`` included (the manual
    optimization docs' ``isinstance(sch, ReduceLROnPlateau)`` check keeps working)."""

    def __init__(self, scheduler: Any, sync: ManualSync, *, what: str) -> None:
        object.__setattr__(self, "_scheduler", scheduler)
        object.__setattr__(self, "_sync", sync)
        object.__setattr__(self, "_what", what)

    @property  # type: ignore[misc]  # isinstance() reads __class__
    def __class__(self) -> type:
        return type(self._scheduler)

    def step(self, *args: Any, **kwargs: Any) -> Any:
        return self._sync.once(lambda: self._scheduler.step(*args, **kwargs), what=self._what)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scheduler, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._scheduler, name, value)


def _parameters(optimizer: Any) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def toggle_optimizer(trainer: TrainerView, optimizer: Any) -> dict[torch.Tensor, bool]:
    """Freeze every parameter of the other optimizers (their requires_grad, saved for untoggle),
    so that this optimizer's backward computes no gradient for them, as Lightning does."""
    saved: dict[torch.Tensor, bool] = {}
    for other in trainer.optimizers:
        for param in _parameters(other):
            if param not in saved:
                saved[param] = param.requires_grad
                param.requires_grad_(False)
    for param in _parameters(optimizer):
        param.requires_grad_(saved.get(param, True))
    return saved


def untoggle_optimizer(saved: dict[torch.Tensor, bool]) -> None:
    for param, requires_grad in saved.items():
        param.requires_grad_(requires_grad)


def toggle_module(module: Any, optimizer: Any) -> None:
    """``module.toggle_optimizer(optimizer)``: toggled once for the step, what it changed kept on the module."""

    def toggle() -> None:
        object.__setattr__(module, "_toggled", toggle_optimizer(module.trainer, optimizer))

    sync_of(module.trainer).once(toggle, what="toggle_optimizer()")


def untoggle_module(module: Any) -> None:
    """``module.untoggle_optimizer(optimizer)``: what toggle_module changed, put back once."""
    sync_of(module.trainer).once(
        lambda: untoggle_optimizer(module.__dict__.pop("_toggled", {})), what="untoggle_optimizer()"
    )


def clip_gradients(
    trainer: TrainerView, optimizer: Any, value: float | None, algorithm: str | None
) -> torch.Tensor | None:
    """Clip the gradients of ``optimizer``'s parameters, as Lightning's ``LightningModule.clip_gradients``:
    None takes the Trainer's setting (no clipping without one), a different value than the Trainer's is
    refused. Through the strategy's clip (one global norm across shards under fsdp), after unscaling."""
    trainer_value, trainer_algorithm = trainer.gradient_clip_val, trainer.gradient_clip_algorithm
    if value is None:
        value = trainer_value or 0.0
    elif trainer_value is not None and trainer_value != value:
        raise ValueError(
            f"clip_gradients(gradient_clip_val={value!r}) with Trainer(gradient_clip_val={trainer_value!r}): "
            "give the value in one place only (as Lightning requires)"
        )
    if algorithm is None:
        algorithm = trainer_algorithm or "norm"
    else:
        algorithm = algorithm.lower()
        if trainer_algorithm is not None and trainer_algorithm != algorithm:
            raise ValueError(
                f"clip_gradients(gradient_clip_algorithm={algorithm!r}) with Trainer(gradient_clip_algorithm="
                f"{trainer_algorithm!r}): give the algorithm in one place only (as Lightning requires)"
            )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"gradient_clip_val must be an int or a float, got {value!r}")
    if algorithm not in ("norm", "value"):
        raise ValueError(f"gradient_clip_algorithm={algorithm!r}; use 'norm' or 'value'")
    if value <= 0:
        return None  # Lightning's: 0 (or no value anywhere) clips nothing
    inner = optimizer.optimizer if isinstance(optimizer, ManualOptimizer) else optimizer
    runtime = trainer.runtime
    norm: torch.Tensor | None = (
        runtime.clip_gradients(trainer.model, inner, max_norm=value)
        if algorithm == "norm"
        else runtime.clip_gradients(trainer.model, inner, clip_val=value)
    )
    return norm
