"""Automatic optimization: a batch's training step and, where it ends an accumulation window, the
optimizer step, with Lightning's hooks where the module overrides them.

Lightning 2.x (``loops/optimization/automatic.py``, ``core/module.py``, ``plugins/precision/``) runs
a training batch as::

    closure = training_step (and *_step_end, the loss / accumulate_grad_batches),
              [first batch of an accumulation window: on_before_zero_grad, optimizer_zero_grad],
              backward (on_before_backward, module.backward, on_after_backward)
    accumulation batch: closure()
    step batch:         module.optimizer_step(epoch, batch_idx, optimizer, closure)
                        -> optimizer.step(closure=closure) -> the precision: closure(), then
                           on_before_optimizer_step, configure_gradient_clipping, then the torch step
                           (GradScaler's under 16-mixed)
    after a step batch: lr_scheduler_step(scheduler, metric) for each scheduler due

The loop takes that route where the module overrides ``optimizer_step`` (or an optimizer needs its
closure: LBFGS). Otherwise it makes the same calls in the same order without a closure and without
looking a hook up per step (``TrainingBatches.step``, the fast path): on_before_optimizer_step,
clipping, ``optimizer.step()``; and where nobody overrides ``on_before_zero_grad`` or
``optimizer_zero_grad`` it zeroes the gradients (set to None) right after the step rather than at
the next window's first batch: every backward sees the same gradients either way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from trainmesh.strategies.step import StepHooks, StepResult, tokens_in
from trainmesh.trainer import manual_optimization
from trainmesh.trainer.optimization_hooks import LoopStepHooks, then_hooks, with_backward_hooks
from trainmesh.trainer.optimizer_turns import optimizer_turns
from trainmesh.trainer.optimizers import step_scheduler
from trainmesh.trainer.profiling import profiled_call, strategy_action
from trainmesh.trainer.publishing import callback_metrics
from trainmesh.trainer.tbptt import truncated_backprop
from trainmesh.trainer.token_loss import TokenLossWindow

if TYPE_CHECKING:
    from trainmesh.trainer.loop_context import LoopContext


class TrainingBatches:
    """One epoch's training steps and optimizer steps; who overrides which hook is read here, once."""

    def __init__(self, ctx: LoopContext, accumulate: int) -> None:
        state, runtime = ctx.state, ctx.runtime
        self.ctx, self.accumulate, self.module = ctx, accumulate, state.module
        self.backward = LossBackward(ctx)
        self.window = TokenLossWindow(type(self.module).__name__)  # a summed loss's tokens until the step
        self.manual = state.manual_backward is not None  # the module steps its optimizers itself
        self.hooks = hooks = LoopStepHooks(ctx.hooks, runtime)
        self._train_step = profiled_call(runtime.train_step, ctx.profiler, strategy_action(runtime, "training_step"))
        _start_turns(ctx, self.manual)
        # Lightning 1.x's training_step(batch, batch_idx, optimizer_idx), once per optimizer (optimizer_turns.py)
        self.turns = optimizer_turns(self)
        # Lightning 1.x's truncated_bptt_steps: each batch split along time, a step per split (tbptt.py)
        self.tbptt = truncated_backprop(self)
        needs_closure = any(isinstance(o.optimizer, torch.optim.LBFGS) for o in state.optimizers)
        self.through_hook = not self.manual and (
            hooks.custom_step or needs_closure or self.turns is not None or self.tbptt is not None
        )
        # Through the hook, the closure zeroes as Lightning's does: an optimizer may run it more than once (LBFGS).
        self.zero_in_window = not self.manual and (hooks.zero_in_window or self.through_hook)
        self.step_hooks = _step_hooks(ctx, self.module, self.backward, accumulate, zero_in_window=self.zero_in_window)
        # Where no hook, clipping or precision step runs before the optimizer's, the step skips _before_step.
        self.plain_step = not (hooks.before_step or hooks.custom_clip or ctx.settings.gradient_clip_val is not None)
        # A pipeline's schedule runs training_step and backward in one call: zeroing between them is
        # not the loop's to do, so the window's zero_grad hooks run just before that call.
        self.zero_before_step = self.zero_in_window and not runtime.capabilities.backward_hooks
        if needs_closure and self.zero_before_step:
            raise ValueError(
                "LBFGS under pipeline parallelism: it runs its closure (the whole pipeline schedule) several times "
                "per step, as often as each stage's own line search decides, so the stages' schedules would stop "
                "matching. Use a first-order optimizer (SGD, Adam, ...) with pipeline stages, or LBFGS without them"
            )

    def run(self, batch: Any, batch_idx: int, *, steps_now: bool) -> StepResult:
        """Train on one batch; step the optimizers where ``steps_now`` (the window's last batch)."""
        self.backward.loss_check.batch_idx = batch_idx
        if self.turns is not None:
            return self.turns.run(batch, batch_idx, steps_now=steps_now)
        if self.tbptt is not None:
            return self.tbptt.run(batch, batch_idx, steps_now=steps_now)
        if self.zero_in_window:
            self._arm_zero_grad(batch_idx)
        if steps_now and self.through_hook:
            result = self._step_through_hook(batch_idx, functools.partial(self._train, batch, batch_idx, True))
            assert result is not None  # the first closure trains, and it ran (checked)
            return result
        result = self._train(batch, batch_idx, steps_now)
        if steps_now and not self.manual:
            self.step(batch_idx)
        return result

    def finish_window(self, batch_idx: int) -> None:
        """The epoch ended inside an accumulation window (a loader without a length, or the module
        ended the epoch early): step on what was accumulated rather than carry it over."""
        if self.turns is not None:
            self.turns.finish_window(batch_idx)
        elif self.tbptt is not None:
            self.tbptt.finish_window(batch_idx)
        elif self.through_hook:
            self._step_through_hook(batch_idx, None)
        else:
            self.step(batch_idx)

    def _train(self, batch: Any, batch_idx: int, sync_grads: bool) -> StepResult:
        # The strategy runs forward, training_step_end (the seeds' hook: it sees every device's
        # output), the loss and backward; gradients stay local until the window's last batch.
        state = self.ctx.state
        result: StepResult = self._train_step(
            state.model, batch, batch_idx, sync_grads=sync_grads, hooks=self.step_hooks
        )
        # A mean loss is the step's loss to report; a summed one's tokens are kept for the optimizer
        # step, which reports the global mean.
        if result.num_tokens is not None or self.accumulate > 1:
            # A window of one batch with a mean loss has nothing to add nor to check it against.
            self.window.add(result)
        if result.loss is not None and result.num_tokens is None:
            state.loop.last_loss = result.loss.detach()
        return result

    def step(self, batch_idx: int) -> None:
        """The optimizer step without a closure (the fast path), each optimizer in turn."""
        for index, optimizer in enumerate(self.ctx.state.optimizers):
            if index == 0 and (self.window.tokens is not None or self.window.mean_losses):
                self._close_window()  # (a window of mean losses, only to start the next one's count)
            if not self.plain_step:
                self._before_step(optimizer)
            optimizer.step()
            if not self.zero_in_window:
                optimizer.zero_grad()
        self._stepped(batch_idx)

    def _step_through_hook(self, batch_idx: int, train: Callable[[], StepResult] | None) -> StepResult | None:
        """``module.optimizer_step(epoch, batch_idx, optimizer, closure)`` for the optimizer (several take
        turns only through Lightning 1.x's optimizer_idx: optimizer_turns.py; otherwise they are refused)."""
        result = None
        for optimizer in self.ctx.state.optimizers:  # one, or none (configure_optimizers returned nothing)
            result = self.step_one(optimizer, batch_idx, train, getattr(self.module, "optimizer_step", None))
            if not self.zero_in_window:
                optimizer.zero_grad()
        self._stepped(batch_idx)
        return result

    def step_one(
        self,
        optimizer: Any,
        batch_idx: int,
        train: Callable[[], StepResult] | None,
        optimizer_step: Callable[..., Any] | None,
    ) -> StepResult | None:
        """One optimizer's ``optimizer_step`` with a closure that trains (where ``train``) and closes the window."""
        state = self.ctx.state
        closure = OptimizerClosure(
            train, self._close_window, last_loss=lambda: state.loop.last_loss, divisor=self.accumulate
        )
        stepping = HookedOptimizer(optimizer, functools.partial(self._before_step, optimizer))
        (optimizer_step or _default_optimizer_step)(state.current_epoch, batch_idx, stepping, closure)
        closure.check_ran(type(self.module).__name__)
        return closure.result

    def _close_window(self) -> None:
        # A summed loss's gradients are complete now (all batches of the window, reduced over the
        # data-parallel ranks): divided by the global token count before anyone reads them.
        state = self.ctx.state
        mean_loss = self.window.close(self.ctx.runtime, state.model)
        if mean_loss is not None:
            state.loop.last_loss = mean_loss

    def _before_step(self, optimizer: Any) -> None:
        """What Lightning's precision runs once the closure has (``_after_closure``): the hook, then clipping."""
        settings, hooks = self.ctx.settings, self.hooks
        if hooks.before_step:
            hooks.call_before_step(optimizer.optimizer)
        if hooks.custom_clip:
            self.module.configure_gradient_clipping(
                optimizer.optimizer,
                gradient_clip_val=settings.gradient_clip_val,
                gradient_clip_algorithm=settings.gradient_clip_algorithm,
            )
        elif settings.gradient_clip_val is not None:
            model, value = self.ctx.state.model, settings.gradient_clip_val
            if settings.gradient_clip_algorithm == "value":
                self.ctx.runtime.clip_gradients(model, optimizer, clip_val=value)
            else:
                self.ctx.runtime.clip_gradients(model, optimizer, max_norm=value)

    def _stepped(self, batch_idx: int) -> None:
        self.ctx.state.global_step += 1
        self.step_schedulers(batch_idx)

    def step_schedulers(self, batch_idx: int) -> None:
        """The step-interval schedulers due after a batch that stepped the optimizer."""
        state = self.ctx.state
        custom = self.module.lr_scheduler_step if self.hooks.custom_scheduler_step else None
        for config in state.lr_scheduler_configs:
            # Lightning's rule: a step-interval scheduler steps where the epoch's batch count (not the
            # optimizer steps) is a multiple of its frequency, at batches that step the optimizer.
            if config.interval == "step" and (batch_idx + 1) % config.frequency == 0:
                step_scheduler(config, callback_metrics(state), custom)

    def _arm_zero_grad(self, batch_idx: int) -> None:
        """At a window's first batch, Lightning's closure zeroes after training_step, before backward."""
        if batch_idx % self.accumulate != 0:
            self.backward.zero_grad = None
        elif self.zero_before_step:
            self._zero_grad(batch_idx)
        else:
            self.backward.zero_grad = functools.partial(self._zero_grad, batch_idx)

    def _zero_grad(self, batch_idx: int) -> None:
        state = self.ctx.state
        zero_grad = getattr(self.module, "optimizer_zero_grad", _default_zero_grad)
        for optimizer in state.optimizers:
            if self.hooks.before_zero_grad:
                self.ctx.hooks.call("on_before_zero_grad", optimizer.optimizer)
            zero_grad(state.current_epoch, batch_idx, optimizer.optimizer)


def _start_turns(ctx: LoopContext, manual: bool) -> None:
    """The optimizers Lightning 1.x's optimizer_idx hooks are indexed in (legacy_optimizer_hooks.py): the
    first is in turn unless several take turns; manual_backward's has none (1.x passed None)."""
    turn, optimizers = ctx.hooks.optimizer_turn, [o.optimizer for o in ctx.state.optimizers]
    turn.optimizers = optimizers
    turn.current = None if manual or not optimizers else (optimizers[0], 0)
    turn.native_amp = ctx.runtime.precision.name in ("16-mixed", "bf16-mixed")


def _default_optimizer_step(epoch: int, batch_idx: int, optimizer: Any, closure: Callable[[], Any]) -> None:
    optimizer.step(closure=closure)  # Lightning's LightningModule.optimizer_step


def _default_zero_grad(epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()  # Lightning's LightningModule.optimizer_zero_grad


class OptimizerClosure:
    """The ``optimizer_closure`` that ``optimizer_step`` receives: training_step and backward (the
    window's zero_grad hooks between them, at its first batch), as Lightning's ``Closure``. Returns
    the loss backward ran on (divided by the accumulation window), detached. It must run: after
    ``optimizer_step`` returns, ``check_ran`` stops the fit if it never did, as Lightning does."""

    def __init__(
        self,
        train: Callable[[], StepResult] | None,
        then: Callable[[], None] | None,
        *,
        last_loss: Callable[[], torch.Tensor | None],
        divisor: int,
    ) -> None:
        self._train, self._then, self._last_loss, self._divisor = train, then, last_loss, divisor
        self.result: StepResult | None = None
        self.ran = False

    def __call__(self) -> torch.Tensor | None:
        with torch.enable_grad():  # as Lightning's: an optimizer may call it under no_grad
            if self._train is not None:
                self.result = self._train()
            if self._then is not None:
                self._then()
        self.ran = True
        result = self.result
        if result is None:  # no training here (a later optimizer's, or the epoch's end): the gradients exist
            return self._last_loss()
        if result.loss is None:  # a pipeline stage before the last
            return None
        # What backward ran on (the strategy's loss_to_backward): a mean loss's share of the window.
        loss = result.loss / self._divisor if result.num_tokens is None and self._divisor > 1 else result.loss
        return loss.detach()

    def check_ran(self, owner: str) -> None:
        if not self.ran:
            raise ValueError(
                f"{owner}.optimizer_step returned without running optimizer_closure, which runs training_step and "
                "backward: pass it to the optimizer (optimizer.step(closure=optimizer_closure)), or call "
                "optimizer_closure() yourself on a step you skip (as Lightning requires)"
            )


class HookedOptimizer:
    """What ``optimizer_step`` receives (Lightning's ``LightningOptimizer``): ``step(closure)`` runs
    the closure, then on_before_optimizer_step and the clipping, then the step through the precision
    (under 16-mixed the closure first, then the grad scaler's step) and the strategy. Every other
    attribute is the torch optimizer's own (``param_groups``, for a warm-up's learning rate)."""

    def __init__(self, optimizer: Any, before_step: Callable[[], None]) -> None:
        self._optimizer = optimizer  # the runtime's wrapper (runtime.RuntimeOptimizer)
        self._before_step = before_step

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        inner: torch.optim.Optimizer = self._optimizer.optimizer
        return inner

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if closure is not None and not callable(closure):
            raise TypeError(f"optimizer.step(closure=...) takes a callable, got {type(closure).__name__}")
        return self._optimizer.step(then_hooks(closure or _nothing, self._before_step))

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer.optimizer, name)

    def __repr__(self) -> str:
        return f"HookedOptimizer({self.optimizer!r})"


def _nothing() -> None:
    return None


class LossBackward:
    """What the loop does with a step's loss: check it is finite (``loss_check.check``, which the
    strategy calls first: on CPU before it changes anything; on an accelerator recorded on the
    device and read later: finite_loss.py), then backward (the strategy has divided a mean loss
    by the accumulation window). One per epoch, updated per step."""

    def __init__(self, ctx: LoopContext) -> None:
        # runtime.backward, inside on_before_backward/on_after_backward and through the module's
        # backward when anyone overrides them
        self.backward = with_backward_hooks(ctx.hooks, ctx.runtime, ctx.state.module)
        loss_check = ctx.state.loop.loss_check
        assert loss_check is not None  # fit sets it
        self.loss_check = loss_check
        # Set at a window's first batch where the zero_grad hooks are overridden: Lightning zeroes there.
        self.zero_grad: Callable[[], None] | None = None

    def __call__(self, loss: torch.Tensor) -> None:
        if self.zero_grad is not None:
            self.zero_grad()
        self.backward(loss)


def _step_hooks(
    ctx: LoopContext, module: Any, backward: LossBackward, accumulate: int, *, zero_in_window: bool
) -> StepHooks:
    hooks, log_collector, manual_backward = ctx.hooks, ctx.state.log_collector, ctx.state.manual_backward
    reader = _OutputReader(module)
    step_hooks = StepHooks(
        step_end=module.training_step_end if hooks.module_overrides("training_step_end") else None,
        loss_of=reader.loss_of,
        count_of=reader.count_of,
        # Where nothing zeroes inside the window, backward itself: one call fewer on every step.
        backward=backward if zero_in_window else backward.backward,
        chunk_scope=log_collector.chunk_scope,
        loss_divisor=accumulate,
        check_loss=backward.loss_check.check,
    )
    if manual_backward is None:
        return step_hooks
    return manual_optimization.manual_step_hooks(step_hooks, manual_backward, module)


class _OutputReader:
    """Reads training_step's output for the strategy's step (``StepHooks.loss_of``/``count_of``):
    bound methods with a fast path for the usual output, a scalar loss tensor, since they run on
    every step; anything else goes through ``loss_of``/``tokens_in`` and their errors."""

    def __init__(self, module: Any) -> None:
        self.module, self.owner = module, f"{type(module).__name__}.training_step"

    def loss_of(self, output: Any) -> torch.Tensor:
        if type(output) is torch.Tensor and output.requires_grad and output.numel() == 1:
            return output
        return loss_of(output, self.module)

    def count_of(self, output: Any) -> torch.Tensor | None:
        return tokens_in(output, owner=self.owner) if isinstance(output, dict) else None


def loss_of(output: Any, module: Any) -> torch.Tensor:
    """The loss in what training_step returned, or an error saying what was wrong with it."""
    name = type(module).__name__
    if isinstance(output, torch.Tensor):
        loss = output
    elif isinstance(output, dict):
        if "loss" not in output:
            raise ValueError(
                f"{name}.training_step returned a dict without a 'loss' key (keys: {sorted(output)}); "
                "put the tensor to minimise under 'loss'"
            )
        loss = output["loss"]
    elif output is None:
        raise ValueError(
            f"{name}.training_step returned None; return the loss tensor (or a dict with 'loss'). "
            "To skip a batch on purpose, return None from a manual-optimization module instead"
        )
    else:
        raise TypeError(
            f"{name}.training_step returned {type(output).__name__}; return the loss tensor or a dict with 'loss'"
        )
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ValueError(
            f"{name}.training_step's loss must be a scalar tensor, got {shape}; reduce it "
            "(e.g. loss.mean()) before returning"
        )
    if not loss.requires_grad:
        raise ValueError(
            f"{name}.training_step's loss does not require grad: it was computed without the "
            "model's parameters, under torch.no_grad(), or detached. Return the loss the "
            "parameters produced"
        )
    return loss
