"""Lightning 1.x's automatic optimization with several optimizers: ``training_step(batch, batch_idx,
optimizer_idx)`` once per optimizer per batch.

pytorch-lightning 1.9.5 (``loops/optimization/optimizer_loop.py``, ``loops/utilities.py``,
``loops/epoch/training_epoch_loop.py``) runs each batch as, for each active optimizer in turn::

    toggle_optimizer(optimizer, optimizer_idx)        # the others' parameters: requires_grad off
    closure = training_step(batch, batch_idx, optimizer_idx), training_step_end,
              [a window's first batch: on_before_zero_grad(optimizer), optimizer_zero_grad(...)],
              backward (on_before_backward, backward, on_after_backward)
    accumulation batch: closure()
    step batch:         optimizer_step(epoch, batch_idx, optimizer, optimizer_idx, closure, ...)
    untoggle_optimizer(optimizer_idx)

The active optimizers are all of them, or, where ``configure_optimizers`` gave each a
``"frequency"``, the one whose share of the cycle ``batch_idx`` falls in. ``global_step`` counts
optimizer steps (two per batch for a GAN), and a step-interval scheduler steps after the batch,
where its optimizer was active. Lightning 2.0 removed this (manual optimization is the 2.x way),
so it comes with one deprecation line. Several optimizers with a ``training_step`` that takes no
``optimizer_idx`` are refused before training, as Lightning 1.x and 2.x refuse them.
"""

from __future__ import annotations

import bisect
import functools
import inspect
import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from trainmesh.manual_calls import toggle_optimizer, untoggle_optimizer
from trainmesh.strategies.step import StepResult
from trainmesh.trainer.hook_arguments import static_attribute
from trainmesh.trainer.lightning1.optimizer_hooks import declares_optimizer_idx
from trainmesh.trainer.optimization.owner import OptimizerSteps
from trainmesh.trainer.several_optimizers import (
    REMOVE_OPTIMIZER_IDX,
    SeveralOptimizersRefused,
    refuse_several_automatic,
)
from trainmesh.trainer.token_loss import TokenLossWindow
from trainmesh.utilities.rank_zero import rank_zero_deprecation

if TYPE_CHECKING:
    from trainmesh.trainer.loop_context import LoopContext


class StepArguments:
    """How the strategy calls 1.x's ``training_step`` (``StepHooks.call``): ``(batch, batch_idx)``, then
    ``optimizer_idx`` where it declares one (the optimizer in turn: ``index``) and ``hiddens`` under truncated
    BPTT (tbptt.py), as 1.9.5's ``_build_training_step_kwargs`` passes them. The runner sets ``index`` and
    ``hiddens`` before each call; nothing is written onto the module. ``turns``: several optimizers take turns
    (``OptimizerTurns``); a lone optimizer gets no index (1.9.5 passed none: the parameter's default runs)."""

    def __init__(self, *, takes_index: bool, turns: bool = False) -> None:
        self.takes_index, self.turns, self.takes_hiddens = takes_index, turns, False
        self.index, self.hiddens = 0, None

    def __call__(self, method: Any, batch: Any, batch_idx: int, *args: Any, **kwargs: Any) -> Any:
        if self.takes_hiddens:
            if self.takes_index:
                return method(batch, batch_idx, self.index, *args, self.hiddens, **kwargs)
            return method(batch, batch_idx, *args, self.hiddens, **kwargs)
        if self.takes_index:
            return method(batch, batch_idx, self.index, *args, **kwargs)
        return method(batch, batch_idx, *args, **kwargs)

    def begin_batch(self, batch: Any, batch_idx: int, active: list[int], optimizers: list[Any]) -> None:
        """Before a batch's turns (a connected loop's ``on_run_start``: ``ConnectedLoopSteps``)."""


class ConnectedLoopSteps(StepArguments):
    """What each turn's ``training_step`` call gives where the program connected a 1.x ``OptimizerLoop``
    subclass (``epoch_loop.batch_loop.connect(optimizer_loop=...)``; yielding_training_step.py's ``YieldLoop``):
    1.9.5's ``OptimizerLoop`` calls its ``on_run_start(optimizers, kwargs)`` once per batch, then, in each
    optimizer's closure, ``_make_step_fn(_build_kwargs(kwargs, optimizer_idx, hiddens))()``, whose
    ``closure_loss`` backward runs on. The turns around it (toggling, zero_grad, backward, the step) are
    ``OptimizerTurns``'."""

    def __init__(self, loop: Any) -> None:
        super().__init__(takes_index=True, turns=True)
        self.loop = loop
        self.kwargs: OrderedDict[str, Any] = OrderedDict()

    def begin_batch(self, batch: Any, batch_idx: int, active: list[int], optimizers: list[Any]) -> None:
        self.kwargs = OrderedDict(batch=batch, batch_idx=batch_idx)
        self.loop.on_run_start([(index, optimizers[index].optimizer) for index in active], self.kwargs)

    def __call__(self, method: Any, batch: Any, batch_idx: int, *args: Any, **kwargs: Any) -> Any:
        result = self.loop._make_step_fn(self.loop._build_kwargs(self.kwargs, self.index, None))()
        return {"loss": result.closure_loss, **result.extra} if result.extra else result.closure_loss


def plan_connected_loop(ctx: LoopContext, manual: bool) -> ConnectedLoopSteps:
    """The turns of a connected 1.x ``OptimizerLoop`` subclass; refused before training where it cannot run
    as 1.9.5 ran it."""
    loop, strategy = ctx.state.optimizer_loop, ctx.runtime.strategy_name
    where = f"a connected {type(loop).__name__} (1.x's epoch_loop.batch_loop.connect(optimizer_loop=...))"
    if manual:
        raise ValueError(f"{where} runs the optimizers of automatic optimization; the module steps its own")
    if not ctx.runtime.capabilities.lightning1_optimizer_loop:
        raise ValueError(
            f"{where} runs under strategy 'single' (one device), where it calls strategy.training_step itself; not "
            f"under '{strategy}'. Use one device, or manual optimization (the Lightning 2.x way)"
        )
    if getattr(ctx.view, "accumulate_grad_batches", 1) != 1:
        raise ValueError(
            f"{where} divides each loss by accumulate_grad_batches itself (ClosureResult), as trainmesh's step does "
            "again: use accumulate_grad_batches=1 with it"
        )
    return ConnectedLoopSteps(loop)


def plan_turns(ctx: LoopContext, manual: bool) -> StepArguments | None:
    """At an epoch's start, before its first batch: 1.x's ``training_step`` arguments where ``training_step``
    declares ``optimizer_idx`` (``turns`` where several optimizers take turns: the runner's, then,
    ``OptimizerTurns``); None where it does not. Refuses what neither Lightning ran."""
    if ctx.state.optimizer_loop is not None:
        return plan_connected_loop(ctx, manual)
    module = ctx.state.module
    name, count = type(module).__name__, len(ctx.state.optimizers)
    function = static_attribute(type(module), "training_step")
    takes_index = inspect.isfunction(function) and declares_optimizer_idx(function)
    if manual and takes_index and count > 1:
        raise SeveralOptimizersRefused(
            f"{REMOVE_OPTIMIZER_IDX} ({name}.training_step declares optimizer_idx, but {name} uses manual optimization (automatic_optimization "
            "= False), where training_step steps its optimizers itself (opt_g, opt_d = self.optimizers()). Remove "
            "optimizer_idx, or set automatic_optimization = True to have it called once per optimizer (Lightning 1.x))"
        )
    if not takes_index:
        # refused after configure_optimizers (several_optimizers.py); again here for optimizers set since
        refuse_several_automatic(module, count, manual=manual, takes_index=False)
        return None
    if count == 1 or manual:
        # 1.9.5 passes optimizer_idx only where several optimizers take turns: a lone optimizer's training_step
        # runs with the parameter's default. Without one 1.9.5 stopped with a TypeError and 2.x refuses it.
        if inspect.signature(function).parameters["optimizer_idx"].default is not inspect.Parameter.empty:
            return StepArguments(takes_index=False)
        raise SeveralOptimizersRefused(REMOVE_OPTIMIZER_IDX)
    strategy = ctx.runtime.strategy_name
    if not ctx.runtime.capabilities.lightning1_loops:  # weights checked against 1.9.5 (test_optimizer_idx.py)
        raise ValueError(
            f"{name}.training_step(batch, batch_idx, optimizer_idx) with {count} optimizers (Lightning 1.x's automatic "
            f"optimization) runs under strategy 'single' or 'ddp', where its weights are checked against Lightning "
            f"1.9's; not under '{strategy}'. Use strategy='ddp', or manual optimization (self.automatic_optimization "
            f"= False) where '{strategy}' trains it"
        )
    overridden = [hook for hook in ("toggle_optimizer", "untoggle_optimizer") if ctx.hooks.module_overrides(hook)]
    if overridden:
        raise ValueError(
            f"{name} overrides {' and '.join(overridden)}, which Lightning 1.x's several-optimizer loop called around "
            "each optimizer's turn; trainmesh toggles the parameters itself there and would skip your override. "
            "Move that code to manual optimization (self.automatic_optimization = False), where training_step calls "
            "self.toggle_optimizer(opt) itself, or drop the override"
        )
    turn = ctx.hooks.optimizer_turn
    if not turn.announced:
        turn.announced = True
        rank_zero_deprecation(
            f"{name}.training_step takes optimizer_idx: Lightning 1.x's automatic optimization with {count} optimizers "
            "(training_step once per optimizer, the others' parameters frozen), removed in Lightning 2.0. trainmesh "
            "runs it as 1.x did; the 2.x way is manual optimization (self.automatic_optimization = False, then "
            "opt_a, opt_b = self.optimizers(), self.toggle_optimizer(opt_a), self.manual_backward(loss), opt_a.step())"
        )
    return StepArguments(takes_index=True, turns=True)


class OptimizerTurns:
    """One epoch of 1.x's several-optimizer loop: a runner on the step's owner (train, closure, step)."""

    manual = False

    def __init__(
        self, steps: OptimizerSteps, arguments: StepArguments, *, check_output: Callable[[Any], Any] | None = None
    ) -> None:
        # check_output: what truncated BPTT checks of each output inside the closure (tbptt.py), as 1.9
        self.steps, self.arguments, self.check_output = steps, arguments, check_output
        state = steps.ctx.state
        self.optimizers = list(state.optimizers)
        self.turn = steps.ctx.hooks.optimizer_turn
        name = type(steps.module).__name__
        self.windows = [TokenLossWindow(name) for _ in self.optimizers]  # each optimizer's own losses
        frequencies = state.optimizer_frequencies
        self.cycle = list(itertools.accumulate(frequencies)) if len(frequencies) == len(self.optimizers) else []

    def active(self, batch_idx: int) -> list[int]:
        """1.x's ``_get_active_optimizers``: every optimizer, or the one whose frequency share holds ``batch_idx``."""
        if not self.cycle:
            return list(range(len(self.optimizers)))
        return [bisect.bisect_right(self.cycle, batch_idx % self.cycle[-1])]

    def run(self, batch: Any, batch_idx: int, *, steps_now: bool) -> StepResult:
        outputs, result = self.turns(batch, batch_idx, steps_now=steps_now, output_of=_output_of)
        if steps_now:
            self.step_schedulers(batch_idx)
        return StepResult(result.loss, outputs, result.num_tokens)

    def turns(
        self, batch: Any, batch_idx: int, *, steps_now: bool, output_of: Callable[[StepResult], Any]
    ) -> tuple[list[Any], StepResult]:
        """Each active optimizer's turn on ``batch`` (a split of it, under truncated BPTT), stepping where
        ``steps_now``: the turns' outputs (``output_of`` each result, right after its turn) and the last result."""
        self.steps.backward.loss_check.batch_idx = batch_idx
        outputs, result = [], None
        self.arguments.begin_batch(batch, batch_idx, self.active(batch_idx), self.optimizers)
        for index in self.active(batch_idx):
            train = functools.partial(self._train, batch, batch_idx, steps_now)
            result = self._turn(index, batch_idx, train, stepping=steps_now)
            if result is not None:
                # 1.9's outputs (on_train_batch_end, training_epoch_end): one per active optimizer
                outputs.append(output_of(result))
        assert result is not None  # a closure that trains ran (checked)
        return outputs, result

    def finish_window(self, batch_idx: int) -> None:
        """The epoch ended inside an accumulation window: each active optimizer steps on what it has."""
        for index in self.active(batch_idx):
            self._turn(index, batch_idx, None, stepping=True)
        self.step_schedulers(batch_idx)

    def _turn(
        self, index: int, batch_idx: int, train: Callable[[], StepResult] | None, *, stepping: bool
    ) -> StepResult | None:
        steps, optimizer = self.steps, self.optimizers[index]
        self.turn.current = (optimizer.optimizer, index)
        self.arguments.index = index
        steps.use_window(self.windows[index])
        # 1.x's closure zeroes this optimizer's gradients at a window's first batch, after training_step
        if train is None:
            steps.disarm_zero_grad()
        else:
            steps.arm_zero_grad(batch_idx, [optimizer])
        saved = toggle_optimizer(steps.ctx.view, optimizer.optimizer)
        try:
            if not stepping:
                assert train is not None
                return train()
            stepped: StepResult | None = steps.step_one(optimizer, batch_idx, train, steps.optimizer_step_hook)
            steps.count_steps(1)  # 1.9 counts each optimizer's step as it completes: the next turn's hooks see it
            return stepped
        finally:
            untoggle_optimizer(saved)

    def _train(self, batch: Any, batch_idx: int, sync_grads: bool) -> StepResult:
        result: StepResult = self.steps.train(batch, batch_idx, sync_grads)
        if result.num_tokens is not None:  # checked inside the closure, before the optimizer steps
            raise ValueError(
                f"{type(self.steps.module).__name__}.training_step returned num_tokens with optimizer_idx: a summed "
                "loss over tokens divides every gradient by the window's count, which mixes the optimizers' turns. "
                "Return a mean loss, or use manual optimization"
            )
        if self.check_output is not None:
            self.check_output(result.output)
        return result

    def step_schedulers(self, batch_idx: int) -> None:
        """1.x's step-interval schedulers after a batch that stepped (those of an active optimizer)."""
        state = self.steps.ctx.state
        # 1.x picks the schedulers' optimizers by the batches trained in the whole fit (total_batch_idx)
        per_epoch = state.num_training_batches
        total_batch_idx = state.current_epoch * int(per_epoch) + batch_idx if per_epoch != float("inf") else batch_idx
        due = set(self.active(total_batch_idx))
        self.steps.step_schedulers(batch_idx, due=lambda scheduler: self.turn.index_of_scheduler(scheduler) in due)


def _output_of(result: StepResult) -> Any:
    output = result.output
    return {"loss": output} if isinstance(output, torch.Tensor) else output  # a loss as a dict, as 1.9's


def epoch_scheduler_due(state: Any, scheduler: Any) -> bool:
    """Lightning 1.x with optimizer frequencies steps an epoch-interval scheduler only where its optimizer
    is the active one at the epoch's last batch (counted over the whole fit); without frequencies, always."""
    frequencies = state.optimizer_frequencies
    if not frequencies or len(frequencies) != len(state.optimizers) or state.num_training_batches == float("inf"):
        return True
    cycle = list(itertools.accumulate(frequencies))
    last = (state.current_epoch + 1) * int(state.num_training_batches) - 1
    index: int = state.hooks.optimizer_turn.index_of_scheduler(scheduler)
    return bisect.bisect_right(cycle, last % cycle[-1]) == index
