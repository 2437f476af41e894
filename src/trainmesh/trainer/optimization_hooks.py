"""Lightning's hooks around a training step's backward, optimizer step and zero_grad.

Lightning 2.x calls them (its "hooks" pseudocode in the LightningModule docs; ``Precision.pre_backward``,
``post_backward``, ``_wrap_closure`` and ``_AutomaticOptimization`` in its source):

- ``on_before_backward(loss)`` and ``on_after_backward()`` around every backward, accumulation
  micro-batches included; ``loss`` is the one backward runs on (divided by the accumulation window,
  scaled under 16-mixed). ``self.manual_backward(loss)`` calls them too.
- ``on_before_optimizer_step(optimizer)`` where the optimizer steps, once the window's gradients are
  complete: unscaled under 16-mixed, not yet clipped. In manual optimization ``opt.step()`` calls it
  (after the closure, when one is given).
- ``on_before_zero_grad(optimizer)`` before the gradients are zeroed, automatic optimization only
  (in manual optimization ``opt.zero_grad()`` is the optimizer's own: Lightning calls nothing).

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

BACKWARD_HOOKS = ("on_before_backward", "on_after_backward")


def with_backward_hooks(hooks: Any, runtime: Any) -> Callable[[torch.Tensor], None]:
    """``runtime.backward``, between ``on_before_backward`` and ``on_after_backward`` where anyone
    overrides them; ``runtime.backward`` itself where nobody does."""
    before, after = hooks.overridden("on_before_backward"), hooks.overridden("on_after_backward")
    if not (before or after):
        backward: Callable[[torch.Tensor], None] = runtime.backward
        return backward
    return _HookedBackward(hooks, runtime, before=before, after=after)


class _HookedBackward:
    def __init__(self, hooks: Any, runtime: Any, *, before: bool, after: bool) -> None:
        self.hooks, self.runtime, self.before, self.after = hooks, runtime, before, after

    def __call__(self, loss: torch.Tensor) -> None:
        if self.before:
            # The loss backward runs on, as Lightning passes it: scaled under 16-mixed.
            self.hooks.call("on_before_backward", self.runtime.precision.scale_loss(loss))
        self.runtime.backward(loss)
        if self.after:
            self.hooks.call("on_after_backward")


def call_before_optimizer_step(hooks: Any, runtime: Any, optimizer: torch.optim.Optimizer) -> None:
    """``on_before_optimizer_step(optimizer)`` on gradients as Lightning shows them: unscaled
    (16-mixed; the clip after it does not unscale twice) and not yet clipped."""
    runtime.precision.unscale_gradients(optimizer)
    hooks.call("on_before_optimizer_step", optimizer)


class LoopStepHooks:
    """The fit loop's ``on_before_optimizer_step`` / ``on_before_zero_grad``: who overrides them
    is read when an epoch starts; the loop tests ``before_step`` / ``before_zero_grad`` per step."""

    def __init__(self, hooks: Any, runtime: Any) -> None:
        self.hooks, self.runtime = hooks, runtime
        self.before_step = hooks.overridden("on_before_optimizer_step")
        self.before_zero_grad = hooks.overridden("on_before_zero_grad")

    def call_before_step(self, optimizer: torch.optim.Optimizer) -> None:
        call_before_optimizer_step(self.hooks, self.runtime, optimizer)

    def call_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        self.hooks.call("on_before_zero_grad", optimizer)


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
    """At fit's start: the step hooks this run would have to skip, refused rather than skipped."""
    if manual:
        owners = _owners(hooks, module, "on_before_zero_grad")
        if owners:
            raise ValueError(
                f"on_before_zero_grad (defined by {owners}) would never run: {type(module).__name__} uses manual "
                "optimization (automatic_optimization = False), where opt.zero_grad() is the optimizer's own and "
                "Lightning calls no hook. Call that code in training_step before opt.zero_grad() (after opt.step(), "
                "for code that reads the updated weights, such as an EMA)"
            )
        return
    if not runtime.capabilities.backward_hooks:
        for hook in BACKWARD_HOOKS:
            owners = _owners(hooks, module, hook)
            if owners:
                raise ValueError(
                    f"{hook} (defined by {owners}) cannot run under pipeline parallelism (pp="
                    f"{runtime.mesh.dims.pp}): the schedule runs backward itself, per micro-batch and per "
                    "stage, and no rank holds the loss before it. Use on_before_optimizer_step(optimizer), "
                    "called on every rank once all of the step's gradients exist (before clipping), or a "
                    "strategy without pipeline stages"
                )


def _owners(hooks: Any, module: Any, hook: str) -> str:
    """The classes that override ``hook`` ('' when none), for an error message."""
    names = [type(module).__name__] if hooks.module_overrides(hook) else []
    names += [type(callback).__name__ for callback in hooks.callbacks_for(hook)]
    return " and ".join(names)
