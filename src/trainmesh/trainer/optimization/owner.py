"""The one owner of the optimizer step: training a batch (the strategy's step), the closure, zero_grad
with its hooks, the optimizer step with its hooks and clipping, the step-interval schedulers, the
token-loss window, and the count of optimizer steps that ``global_step`` is (Lightning reads its
``global_step`` from the optimizer loop's progress the same way).

The runners (runners.py, and Lightning 1.x's in ``trainer/lightning1/``) decide when to call what;
only this class changes the step's state. Nothing else writes ``state.global_step`` but the restore
(a checkpoint's, a peer's, a worker's outcome), which ``tests/test_architecture.py`` checks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from trainmesh.runtime_optimizer import has_own_step, step_trained
from trainmesh.strategies.step import StepResult
from trainmesh.trainer.optimization.closure import (
    HookedOptimizer,
    LossBackward,
    OptimizerClosure,
    default_optimizer_step,
    default_zero_grad,
)
from trainmesh.trainer.optimization.progress import count_optimizer_steps
from trainmesh.trainer.optimization.step_hooks import step_hooks_for
from trainmesh.trainer.optimization_hooks import LoopStepHooks
from trainmesh.trainer.optimizers import step_scheduler
from trainmesh.trainer.profiling import profiled_call, strategy_action
from trainmesh.trainer.publishing import callback_metrics
from trainmesh.trainer.token_loss import TokenLossWindow

if TYPE_CHECKING:
    from trainmesh.trainer.loop_context import LoopContext


class OptimizerSteps:
    """One epoch's training steps and optimizer steps; who overrides which hook is read here, once.
    ``through_hook``: every step goes through ``module.optimizer_step`` with a closure (Lightning 1.x's
    loops always do)."""

    def __init__(
        self,
        ctx: LoopContext,
        accumulate: int,
        *,
        manual: bool,
        through_hook: bool = False,
        training_step: Callable[..., Any] | None = None,
    ) -> None:
        state, runtime = ctx.state, ctx.runtime
        self.ctx, self.accumulate, self.module, self.manual = ctx, accumulate, state.module, manual
        self.backward = LossBackward(ctx)
        self.window = TokenLossWindow(type(self.module).__name__)  # a summed loss's tokens until the step
        self.hooks = hooks = LoopStepHooks(ctx.hooks, runtime)
        self._train_step = profiled_call(runtime.train_step, ctx.profiler, strategy_action(runtime, "training_step"))
        needs_closure = any(isinstance(o.optimizer, torch.optim.LBFGS) for o in state.optimizers)
        # An optimizer with a step of its own gets Lightning's closure, which trains (it may run it twice: SAM)
        own_step = any(has_own_step(o) for o in state.optimizers)
        self.through_hook = not manual and (hooks.custom_step or needs_closure or own_step or through_hook)
        # Lightning zeroes at a window's first batch, after training_step and before backward, and leaves the
        # gradients in place after the step: hooks between (on_train_batch_end, the next on_train_batch_start)
        # read them, and gradients something else made before the window (a callback's backward in
        # on_train_start) are cleared. Zeroing right after the step instead changed both.
        self.zero_in_window = not manual
        # How the strategy calls training_step: Lightning 1.x's runner's arguments, or those its signature takes
        call = training_step if training_step is not None else ctx.hooks.step_caller("training_step")
        self.step_hooks = step_hooks_for(
            ctx, self.module, self.backward, accumulate, zero_in_window=self.zero_in_window, call=call
        )
        # Where no hook, clipping or precision step runs before the optimizer's, the step skips _before_step.
        self.plain_step = not (hooks.before_step or hooks.custom_clip or ctx.settings.clips)
        # A pipeline's schedule runs training_step and backward in one call: zeroing between them is
        # not the loop's to do, so the window's zero_grad hooks run just before that call.
        self.zero_before_step = self.zero_in_window and not runtime.capabilities.backward_hooks
        if needs_closure and self.zero_before_step:
            raise ValueError(
                "LBFGS under pipeline parallelism: it runs its closure (the whole pipeline schedule) several times "
                "per step, as often as each stage's own line search decides, so the stages' schedules would stop "
                "matching. Use a first-order optimizer (SGD, Adam, ...) with pipeline stages, or LBFGS without them"
            )
        # The module's (its own or the default), looked up once, called with what its signature asks for
        self.optimizer_step_hook = _module_hook(ctx, "optimizer_step")
        self.zero_grad_hook = _module_hook(ctx, "optimizer_zero_grad")
        self.clip_hook = _module_hook(ctx, "configure_gradient_clipping")
        # run as its own hook, where self.log raises as Lightning's fx validator makes it
        self.scheduler_step_hook = (
            ctx.hooks.module_hook("lr_scheduler_step") if hasattr(ctx.state.module, "lr_scheduler_step") else None
        )
        self._hooked: dict[int, HookedOptimizer] = {}  # what optimizer_step receives, by optimizer

    # ---- training a batch ---------------------------------------------------------------------------
    def train(self, batch: Any, batch_idx: int, sync_grads: bool) -> StepResult:
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

    def use_window(self, window: TokenLossWindow) -> None:
        """The token-loss window the next batches add to (1.x's optimizer turns: one per optimizer)."""
        self.window = window

    # ---- zero_grad, written once --------------------------------------------------------------------
    def arm_zero_grad(self, batch_idx: int, optimizers: list[Any] | None = None) -> None:
        """Where the window's zero_grad runs for the next backward: at a window's first batch after
        training_step, before backward, as Lightning's closure (``optimizers``: those to zero, all by
        default); nothing at the window's other batches."""
        if batch_idx % self.accumulate != 0:
            self.backward.zero_grad = None
        elif self.zero_before_step:
            self.zero_grad(batch_idx, optimizers)
        else:
            self.backward.zero_grad = functools.partial(self.zero_grad, batch_idx, optimizers)

    def disarm_zero_grad(self) -> None:
        self.backward.zero_grad = None

    def zero_grad(self, batch_idx: int, optimizers: list[Any] | None = None) -> None:
        """``on_before_zero_grad(optimizer)`` then ``optimizer_zero_grad(epoch, batch_idx, optimizer)`` for each."""
        state = self.ctx.state
        zero_grad = self.zero_grad_hook or default_zero_grad
        for optimizer in state.optimizers if optimizers is None else optimizers:
            state.progress.zero_grads.count()  # Lightning's optim_progress.optimizer.zero_grad
            if self.hooks.before_zero_grad:
                self.ctx.hooks.call("on_before_zero_grad", optimizer.optimizer)
            zero_grad(state.current_epoch, batch_idx, optimizer.optimizer)

    # ---- the optimizer step -------------------------------------------------------------------------
    def step(self, batch_idx: int) -> None:
        """The optimizer step without a closure (the fast path), each optimizer in turn."""
        for index, optimizer in enumerate(self.ctx.state.optimizers):
            if index == 0 and (self.window.tokens is not None or self.window.mean_losses):
                self.close_window()  # (a window of mean losses, only to start the next one's count)
            if not self.plain_step:
                self.before_step(optimizer)
            # Lightning's step always gets a closure; training ran already, so this one gives its loss
            # (or none, where nothing can tell: runtime_optimizer.step_trained)
            step_trained(optimizer, self._step_loss)
        self.stepped(batch_idx)

    def _step_loss(self) -> Any:
        return self.ctx.state.loop.last_loss

    def step_through_hook(self, batch_idx: int, train: Callable[[], StepResult] | None) -> StepResult | None:
        """``module.optimizer_step(epoch, batch_idx, optimizer, closure)`` for the optimizer (several take
        turns only through Lightning 1.x's optimizer_idx: lightning1/optimizer_turns.py; otherwise refused)."""
        result = None
        for optimizer in self.ctx.state.optimizers:  # one, or none (configure_optimizers returned nothing)
            result = self.step_one(optimizer, batch_idx, train, self.optimizer_step_hook)
        self.stepped(batch_idx)
        return result

    def step_one(
        self,
        optimizer: Any,
        batch_idx: int,
        train: Callable[[], StepResult] | None,
        optimizer_step: Callable[..., Any] | None,
    ) -> StepResult | None:
        """One optimizer's ``optimizer_step`` (the module's, or Lightning's default where None) with a
        closure that trains (where ``train``) and closes the window."""
        state = self.ctx.state
        if train is not None and optimizer_step is not None:  # (Lightning's default step logs nothing)
            train = _as_training_step(state.log_collector, train)
        closure = OptimizerClosure(
            train, self.close_window, last_loss=lambda: state.loop.last_loss, divisor=self.accumulate
        )
        stepping = self._hooked.get(id(optimizer))
        if stepping is None:  # one per optimizer for the epoch (it holds the optimizer: the id stays its)
            stepping = HookedOptimizer.of(optimizer, functools.partial(self.before_step, optimizer))
            self._hooked[id(optimizer)] = stepping
        (optimizer_step or default_optimizer_step)(state.current_epoch, batch_idx, stepping, closure)
        if not closure.ran:  # Lightning counts the hook's step (global_step) before it finds the closure not run
            count_optimizer_steps(state)
        closure.check_ran(type(self.module).__name__)
        return closure.result

    def close_window(self) -> None:
        # A summed loss's gradients are complete now (all batches of the window, reduced over the
        # data-parallel ranks): divided by the global token count before anyone reads them.
        state = self.ctx.state
        mean_loss = self.window.close(self.ctx.runtime, state.model)
        if mean_loss is not None:
            state.loop.last_loss = mean_loss

    def before_step(self, optimizer: Any) -> None:
        """What Lightning's precision runs once the closure has (``_after_closure``): the hook, then clipping."""
        settings, hooks = self.ctx.settings, self.hooks
        # 16-mixed: unscaled before the hook and any clipping, as Lightning's precision unscales after the closure
        self.ctx.runtime.precision.unscale_gradients(optimizer.optimizer)
        if hooks.before_step:
            hooks.call_before_step(optimizer.optimizer)
        if hooks.custom_clip and self.clip_hook is not None:
            self.clip_hook(
                optimizer.optimizer,
                gradient_clip_val=settings.gradient_clip_val,
                gradient_clip_algorithm=settings.gradient_clip_algorithm,
            )
        elif settings.clips:
            model, value = self.ctx.state.model, settings.gradient_clip_val
            if settings.gradient_clip_algorithm == "value":
                self.ctx.runtime.clip_gradients(model, optimizer, clip_val=value)
            else:
                self.ctx.runtime.clip_gradients(model, optimizer, max_norm=value)

    # ---- after the step: its count and the schedulers -----------------------------------------------
    def stepped(self, batch_idx: int) -> None:
        state = self.ctx.state
        count_optimizer_steps(state)  # (count_steps's, called directly: one Python call fewer per step)
        state.progress.step_pending = False
        if state.lr_scheduler_configs:  # none configured: no call per step
            self.step_schedulers(batch_idx)

    def count_steps(self, count: int) -> None:
        """``count`` optimizer steps done (1.x's turns: one per active optimizer): ``global_step``."""
        count_optimizer_steps(self.ctx.state, count)

    def step_schedulers(self, batch_idx: int, *, due: Callable[[Any], bool] | None = None) -> None:
        """The step-interval schedulers due after a batch that stepped the optimizer (``due``: of those,
        the ones whose optimizer was active, for 1.x's turns)."""
        state = self.ctx.state
        custom = self.scheduler_step_hook if self.hooks.custom_scheduler_step else None
        for config in state.lr_scheduler_configs:
            # Lightning's rule: a step-interval scheduler steps where the epoch's batch count (not the
            # optimizer steps) is a multiple of its frequency, at batches that step the optimizer.
            if config.interval == "step" and (batch_idx + 1) % config.frequency == 0:
                if due is None or due(config.scheduler):
                    if config.reduce_on_plateau:  # stepped by the fit loop after the batch's validation
                        state.loop.plateau_due.append(config)
                    else:
                        step_scheduler(config, callback_metrics(state), custom, counted=state.progress.schedulers)


def _module_hook(ctx: LoopContext, hook: str) -> Callable[..., Any] | None:
    """The module's ``hook`` through the dispatcher (arguments from its signature); None where it has none.
    The module's own runs as that hook: what it logs is that hook's metric, as Lightning names it (its fx
    validator's rules); the base class's default logs nothing, so it is called directly (no wrapper per step)."""
    if not hasattr(ctx.state.module, hook):
        return None
    return ctx.hooks.module_hook(hook) if ctx.hooks.module_overrides(hook) else ctx.hooks.module_method(hook)


def _as_training_step(collector: Any, train: Callable[[], StepResult]) -> Callable[[], StepResult]:
    """``train`` run as ``training_step`` (the log collector's hook) from inside ``optimizer_step``'s
    closure: what training_step logs is its own metric, not optimizer_step's, as in Lightning."""

    def run() -> StepResult:
        outer, collector.fx = collector.fx, "training_step"
        try:
            return train()
        finally:
            collector.fx = outer

    return run
