"""What ``optimizer_step`` receives and runs: the closure (training_step and backward, as Lightning's
``Closure``), the optimizer that runs the step's hooks (Lightning's ``LightningOptimizer``), and what
the loop does with a step's loss (``LossBackward``)."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from trainmesh.strategies.step import StepResult
from trainmesh.trainer.optimization_hooks import then_hooks, with_backward_hooks
from trainmesh.utilities.collections import apply_to_tensors
from trainmesh.utilities.exceptions import MisconfiguredValue
from trainmesh.utilities.wrapped_objects import sharing_state, slot_method

if TYPE_CHECKING:
    from trainmesh.trainer.loop_context import LoopContext


def default_optimizer_step(epoch: int, batch_idx: int, optimizer: Any, closure: Callable[[], Any]) -> None:
    optimizer.step(closure=closure)  # Lightning's LightningModule.optimizer_step


def default_zero_grad(epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()  # Lightning's LightningModule.optimizer_zero_grad


def batch_end_outputs(output: Any, *, manual: bool, accumulate: int) -> dict[str, Any]:
    """What ``on_train_batch_end`` receives as ``outputs`` for what ``training_step`` returned, as
    Lightning 2.x builds it (``ClosureResult.asdict`` / ``ManualResult.asdict``): always a dict;
    ``{"loss": ...}`` for a tensor, the returned dict's other keys beside it, ``{}`` for None. The
    loss is detached (a callback keeping it does not keep the graph); in automatic optimization it
    is the one backward ran on: divided by ``accumulate_grad_batches``."""
    if type(output) is torch.Tensor:  # the common case, first: a returned loss (no ABC check of Mapping)
        loss = output.detach()
        return {"loss": loss if manual else loss.clone() if accumulate == 1 else loss / accumulate}
    if output is None:
        return {}
    if isinstance(output, list):  # Lightning 1.x's runners (optimizer turns, tbptt splits): 1.9's lists, detached
        return apply_to_tensors(output, torch.Tensor.detach)  # type: ignore[no-any-return]
    extra = dict(output) if isinstance(output, Mapping) else {"loss": output}
    if not isinstance(extra.get("loss"), torch.Tensor):
        return extra
    loss = extra["loss"].detach()
    if not manual:
        # Lightning's (loss / accumulate).detach().clone(): a tensor of its own either way, made by
        # one op (a division is a new tensor already; x / 1 == x, so at 1 a clone, a third the cost).
        loss = loss.clone() if accumulate == 1 else loss / accumulate
    extra["loss"] = loss
    return extra


def epoch_end_output(output: Any, *, manual: bool, accumulate: int) -> Any:
    """What pytorch-lightning 1.9.5's ``training_epoch_end(outputs)`` holds for one batch: the dict
    ``on_train_batch_end`` receives (``{"loss": ...}`` for a returned tensor, the loss the backward ran on).
    As 1.9.5's ``ClosureResult.asdict`` / ``ManualResult.asdict``, only the loss is detached: the other keys
    keep their autograd graph (a graph kept per batch until the epoch's end, as 1.9.5 keeps it). A batch
    whose ``training_step`` returned None is left out (manual optimization too: 1.9.5's batch loop keeps
    no empty result); 1.x's lists (optimizer turns, tbptt splits) detached."""
    if output is None:
        return None
    return batch_end_outputs(output, manual=manual, accumulate=accumulate)


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
            # Lightning (1.9.5 and 2.6) raises MisconfigurationException here; a ValueError before, so both names catch it
            # Lightning's own words first: a program (and Lightning's test_closure.py) matches on them
            raise MisconfiguredValue(
                "The closure hasn't been executed. HINT: did you call `optimizer_closure()` in your "
                "`optimizer_step` hook? It could also happen because the `optimizer.step(optimizer_closure)` "
                f"call did not execute it internally. ({owner}.optimizer_step returned without running "
                "optimizer_closure, which runs training_step and backward: pass it to the optimizer "
                "(optimizer.step(closure=optimizer_closure)), or call optimizer_closure() yourself on a step "
                "you skip)"
            )


class HookedOptimizer:
    """What ``optimizer_step`` receives (Lightning's ``LightningOptimizer``): ``step(closure)`` runs
    the closure, then on_before_optimizer_step and the clipping, then the step through the precision
    (under 16-mixed the closure first, then the grad scaler's step) and the strategy. It is the
    user's optimizer to anyone who asks, as Lightning's: a subclass of its class sharing its
    ``__dict__`` (``param_groups`` for a warm-up's learning rate: utilities/wrapped_objects.py).
    Made by ``HookedOptimizer.of(runtime_optimizer, before_step)``."""

    __slots__ = ("_optimizer", "_before_step", "_tm_step", "_tm_zero_grad")
    step = slot_method("_tm_step")
    zero_grad = slot_method("_tm_zero_grad")
    _tm_joined_name = "Lightning{}"  # Lightning's LightningOptimizer's class name ("LightningAdam"), its repr's too

    _optimizer: Any  # the runtime's wrapper (runtime_optimizer.RuntimeOptimizer)
    _before_step: Callable[[], None]
    _tm_step: Callable[..., Any]
    _tm_zero_grad: Callable[..., None]

    @classmethod
    def of(cls, optimizer: Any, before_step: Callable[[], None]) -> HookedOptimizer:
        made = sharing_state(cls, optimizer.optimizer)
        made._optimizer, made._before_step = optimizer, before_step
        made._tm_step = types.MethodType(cls._step, made)
        made._tm_zero_grad = types.MethodType(cls._zero_grad, made)
        return made

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        inner: torch.optim.Optimizer = self._optimizer.optimizer
        return inner

    def _step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        if closure is not None and not callable(closure):
            raise TypeError(f"optimizer.step(closure=...) takes a callable, got {type(closure).__name__}")
        # kwargs: the program's own arguments to step(), passed on to the optimizer's as Lightning's
        return self._optimizer.step(then_hooks(closure or _nothing, self._before_step), **kwargs)

    def _zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def _tm_strategy_step(self, closure: Callable[[], Any] | None, **kwargs: Any) -> Any:
        """``trainer.strategy.optimizer_step(optimizer, closure)`` given this optimizer: Lightning's
        precision plugin wraps the closure with the step hooks and calls this optimizer's ``step``, which
        wraps it again, so on_before_optimizer_step and the clipping run twice (1.9.5 and 2.6 alike)."""
        return self._step(then_hooks(closure or _nothing, self._before_step), **kwargs)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Pickled and copied as what it wraps, wrapped again (its class is made at run time: not importable)
        return (HookedOptimizer.of, (self._optimizer, self._before_step))


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
        self.backward = with_backward_hooks(ctx.hooks, ctx.runtime)
        loss_check = ctx.state.loop.loss_check
        assert loss_check is not None  # fit sets it
        self.loss_check = loss_check
        # Set at a window's first batch where the zero_grad hooks are overridden: Lightning zeroes there.
        self.zero_grad: Callable[[], None] | None = None
        # Set per batch by the automatic runner: the loop's forward-only switch (no zero_grad, no backward)
        self.forward_only = False

    def __call__(self, loss: torch.Tensor) -> None:
        if self.forward_only:
            return
        if self.zero_grad is not None:
            self.zero_grad()
        self.backward(loss)

    def skip(self) -> None:
        """training_step returned None: no backward for this batch, but the window's zero_grad still
        runs where it is armed (Lightning's closure zeroes before it looks at the loss)."""
        if self.zero_grad is not None:
            self.zero_grad()
