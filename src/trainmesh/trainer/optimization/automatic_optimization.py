"""Automatic optimization (Lightning 2.x's): a batch's training step and, where it ends an accumulation
window, the optimizer step, with Lightning's hooks where the module overrides them.

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

The automatic runner takes that route where the module overrides ``optimizer_step`` (or an optimizer
needs its closure: LBFGS). Otherwise it makes the same calls in the same order without a closure and
without looking a hook up per step (``OptimizerSteps.step``, the fast path): on_before_optimizer_step,
clipping, ``optimizer.step()``. Gradients are zeroed where Lightning zeroes them, at each window's
first batch before backward, and stay after the step (hooks until the next window read them).

A forward-only batch (Lightning's ``fit_loop._skip_backward``, set by a callback:
StochasticWeightAveraging's batch-norm epoch) runs training_step and the rest of the closure, but
neither zero_grad nor backward; where it ends a window the optimizer still steps, as Lightning's.
"""

from __future__ import annotations

import functools
from typing import Any

from trainmesh.strategies.step import StepResult
from trainmesh.trainer.optimization.owner import OptimizerSteps


class AutomaticRunner:
    """Lightning 2.x's automatic optimization: the fast path, or the closure through ``optimizer_step``."""

    manual = False

    def __init__(self, steps: OptimizerSteps) -> None:
        self.steps = steps

    def run(self, batch: Any, batch_idx: int, *, steps_now: bool) -> StepResult:
        steps = self.steps
        steps.backward.loss_check.batch_idx = batch_idx
        # Lightning's _skip_backward, read per batch as its closure is built (loop_state.LoopPosition.forward_only)
        forward_only = steps.backward.forward_only = steps.ctx.state.loop.forward_only
        if forward_only:
            if steps.zero_before_step:
                raise ValueError(
                    "A forward-only training epoch (trainer.fit_loop._skip_backward, StochasticWeightAveraging on a "
                    "model with batch norm) under pipeline parallelism: its schedule runs backward with the forward, so "
                    "the loop cannot leave it out. Recompute the batch-norm statistics after fit "
                    "(torch.optim.swa_utils.update_bn) or train without pipeline stages"
                )
            steps.disarm_zero_grad()
        else:
            steps.arm_zero_grad(batch_idx)
        # Lightning's optimizer step progress counts the step ready before its closure trains the batch
        steps.ctx.state.progress.step_pending = steps_now
        if steps_now and steps.through_hook:
            result = steps.step_through_hook(batch_idx, functools.partial(steps.train, batch, batch_idx, True))
            assert result is not None  # the first closure trains, and it ran (checked)
            return result
        result = steps.train(batch, batch_idx, steps_now)
        if steps_now:
            steps.step(batch_idx)
        return result

    def finish_window(self, batch_idx: int) -> None:
        """The epoch ended inside an accumulation window (a loader without a length, or the module
        ended the epoch early): step on what was accumulated rather than carry it over."""
        if self.steps.through_hook:
            self.steps.step_through_hook(batch_idx, None)
        else:
            self.steps.step(batch_idx)
