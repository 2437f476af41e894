"""Lightning's hooks around a training step's backward, optimizer step and zero_grad.

Lightning 2.x calls them (its "hooks" pseudocode in the LightningModule docs; ``Precision.pre_backward``,
``post_backward``, ``_wrap_closure`` and ``_AutomaticOptimization`` in its source):

- ``on_before_backward(loss)``, ``backward(loss)`` (the module's: ``loss.backward()`` by default) and
  ``on_after_backward()`` around every backward, accumulation micro-batches included; ``loss`` is the one
  backward runs on (divided by the accumulation window, scaled under 16-mixed). ``self.manual_backward(loss)``
  calls them too.
- ``on_before_optimizer_step(optimizer)`` where the optimizer steps, once the window's gradients are
  complete: unscaled under 16-mixed, not yet clipped; then ``configure_gradient_clipping``. In manual
  optimization ``opt.step()`` calls the first (after the closure, when one is given).
- ``on_before_zero_grad(optimizer)`` and ``optimizer_zero_grad(epoch, batch_idx, optimizer)``, automatic
  optimization only (in manual optimization ``opt.zero_grad()`` is the optimizer's own: Lightning calls
  nothing): at the first batch of each accumulation window, after training_step, before backward
  (automatic_optimization.py). Where nobody overrides either, the loop zeroes the gradients right after
  the optimizer step instead, which leaves the same gradients for every backward.

Each hook runs on the callbacks, then on the module (``HookDispatcher.call``: Lightning's order).
trainmesh zeroes gradients right after the optimizer step, not at the next window's first batch as
Lightning does, so ``on_before_zero_grad`` runs there: it sees what Lightning's sees (the updated
weights, the step's gradients), one batch earlier, after the run's last step as well, and not before
the first step.

Which hooks anyone overrides is read once per epoch (the fit loop) or per call of ``opt.step()``
(manual optimization): when nobody does, the step runs exactly the calls it ran without them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from trainmesh.utilities.rank_zero import rank_zero_warn

BACKWARD_HOOKS = ("on_before_backward", "on_after_backward")
# Module hooks of automatic optimization only: in manual optimization training_step steps, zeroes,
# clips and schedules itself, and Lightning calls none of them.
AUTOMATIC_ONLY_HOOKS = ("optimizer_step", "optimizer_zero_grad", "configure_gradient_clipping", "lr_scheduler_step")


def with_backward_hooks(hooks: Any, runtime: Any) -> Callable[..., None]:
    """``runtime.backward``, between ``on_before_backward`` and ``on_after_backward`` and through the
    module's ``backward`` where anyone overrides them; ``runtime.trainer_port.loss_backward`` where nobody does.
    Called with the loss and what ``loss.backward`` takes (``manual_backward(loss, retain_graph=True)``)."""
    before, after = hooks.overridden("on_before_backward"), hooks.overridden("on_after_backward")
    custom = hooks.module_overrides("backward")
    if not (before or after or custom):
        backward: Callable[..., None] = runtime.trainer_port.loss_backward
        return backward
    # the module's backward through the dispatcher (Lightning 1.x's backward(loss, optimizer, optimizer_idx) too),
    # run as "backward": what it logs is that hook's, as in Lightning
    return _HookedBackward(
        hooks, runtime, hooks.module_hook("backward") if custom else None, before=before, after=after
    )


class _HookedBackward:
    def __init__(
        self, hooks: Any, runtime: Any, module_backward: Callable[..., None] | None, *, before: bool, after: bool
    ) -> None:
        self.hooks, self.runtime, self.before, self.after = hooks, runtime, before, after
        self.module_backward = module_backward

    def __call__(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        # As Lightning's Strategy.backward: the precision scales the loss (16-mixed), the hook sees the
        # scaled loss, and the module's backward (loss.backward() by default) runs on it.
        scaled = self.runtime.precision.scale_loss(loss)
        if self.before:
            self.hooks.call("on_before_backward", scaled)
        if self.module_backward is not None:
            self.module_backward(scaled, *args, **kwargs)
        else:
            scaled.backward(*args, **kwargs)
        if self.after:
            self.hooks.call("on_after_backward")


def call_before_optimizer_step(hooks: Any, runtime: Any, optimizer: torch.optim.Optimizer) -> None:
    """``on_before_optimizer_step(optimizer)`` on gradients as Lightning shows them: unscaled
    (16-mixed; the clip after it does not unscale twice) and not yet clipped."""
    runtime.precision.unscale_gradients(optimizer)
    hooks.call("on_before_optimizer_step", optimizer)


class LoopStepHooks:
    """Who overrides the fit loop's step hooks, read when an epoch starts; the loop tests these flags
    per step (automatic_optimization.py)."""

    def __init__(self, hooks: Any, runtime: Any) -> None:
        self.hooks, self.runtime = hooks, runtime
        self.before_step = hooks.overridden("on_before_optimizer_step")
        self.before_zero_grad = hooks.overridden("on_before_zero_grad")
        self.custom_step = hooks.module_overrides("optimizer_step")
        self.custom_clip = hooks.module_overrides("configure_gradient_clipping")
        self.custom_scheduler_step = hooks.module_overrides("lr_scheduler_step")

    def call_before_step(self, optimizer: torch.optim.Optimizer) -> None:
        call_before_optimizer_step(self.hooks, self.runtime, optimizer)


def then_hooks(closure: Callable[[], Any], announce: Callable[[], None]) -> Callable[[], Any]:
    """``closure`` followed by ``announce`` each time the optimizer calls it (LBFGS calls it several
    times): Lightning's ``opt.step(closure)`` calls ``on_before_optimizer_step`` once the closure
    has run backward, so the hook sees its gradients."""

    def closure_then_hooks() -> Any:
        result = closure()
        announce()
        return result

    return closure_then_hooks


def refuse_uncallable_step_hooks(hooks: Any, module: Any, runtime: Any, *, manual: bool) -> None:
    """At fit's start: the step hooks this run will not call. In manual optimization Lightning calls
    none of the automatic-optimization hooks and says nothing; trainmesh does the same (the run's
    numbers are Lightning's) and says so once. Under pipeline parallelism, which Lightning does not
    have, the backward hooks cannot run and are refused."""
    if manual:
        for hook in ("on_before_zero_grad", *AUTOMATIC_ONLY_HOOKS):
            owners = _owners(hooks, module, hook)
            if owners:
                rank_zero_warn(
                    f"{hook} (defined by {owners}) is not called: {type(module).__name__} uses manual optimization "
                    f"(automatic_optimization = False), where training_step steps, zeroes, clips and schedules itself "
                    f"and Lightning calls no such hook either. {_MANUAL_INSTEAD[hook]}"
                )
        return
    if not runtime.capabilities.backward_hooks:
        for hook in (*BACKWARD_HOOKS, "backward"):
            owners = _owners(hooks, module, hook)
            if owners:
                instead = "on_before_optimizer_step(optimizer), called on every rank once all of the step's gradients exist (before clipping)"
                raise ValueError(
                    f"{hook} (defined by {owners}) cannot run under pipeline parallelism (pp="
                    f"{runtime.mesh.dims.pp}): the schedule runs backward itself, per micro-batch and per "
                    f"stage, and no rank holds the loss before it. Use {instead}, or a strategy without pipeline stages"
                )


_MANUAL_INSTEAD = {
    "on_before_zero_grad": "Call that code in training_step before opt.zero_grad() (after opt.step(), for code that "
    "reads the updated weights, such as an EMA)",
    "optimizer_step": "Put that code around opt.step() in training_step",
    "optimizer_zero_grad": "Put that code where training_step calls opt.zero_grad()",
    "configure_gradient_clipping": "Call self.clip_gradients(opt, gradient_clip_val=..., gradient_clip_algorithm=...) "
    "in training_step before opt.step()",
    "lr_scheduler_step": "Step the schedulers in training_step (sch = self.lr_schedulers(); sch.step())",
}


def _owners(hooks: Any, module: Any, hook: str) -> str:
    """The classes that override ``hook`` ('' when none), for an error message."""
    names = [type(module).__name__] if hooks.module_overrides(hook) else []
    names += [type(callback).__name__ for callback in hooks.callbacks_for(hook)]
    return " and ".join(names)
