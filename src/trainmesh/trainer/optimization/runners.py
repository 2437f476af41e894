"""What a training batch runs, per batch: one runner protocol, its implementations, and the choice.

Every runner holds the one owner of the step (owner.py) and changes nothing else: automatic
optimization (automatic_optimization.py: Lightning 2.x's), manual optimization (below), and
Lightning 1.x's runners (several optimizers taking turns, truncated BPTT) in ``trainer/lightning1/``,
which the core enters here (the choice) and through the hook dispatcher only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from trainmesh.strategies.step import StepResult
from trainmesh.trainer.optimization.automatic_optimization import AutomaticRunner
from trainmesh.trainer.optimization.owner import OptimizerSteps

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime
    from trainmesh.trainer.loop_context import LoopContext
    from trainmesh.trainer.loop_state import LoopState


class Runner(Protocol):
    """One epoch's training batches: ``run`` trains on a batch and steps the optimizers where
    ``steps_now`` (the accumulation window's last batch); ``finish_window`` steps on what was
    accumulated where the epoch ended inside a window."""

    manual: bool

    def run(self, batch: Any, batch_idx: int, *, steps_now: bool) -> StepResult: ...

    def finish_window(self, batch_idx: int) -> None: ...


class ManualRunner:
    """Manual optimization: training_step steps its optimizers itself (``opt.step()`` counts them)."""

    manual = True

    def __init__(self, steps: OptimizerSteps) -> None:
        self.steps = steps

    def run(self, batch: Any, batch_idx: int, *, steps_now: bool) -> StepResult:
        self.steps.backward.loss_check.batch_idx = batch_idx
        return self.steps.train(batch, batch_idx, steps_now)

    def finish_window(self, batch_idx: int) -> None:
        self.steps.step(batch_idx)


def choose_runner(ctx: LoopContext, accumulate: int) -> Runner:
    """At an epoch's start, before its first batch: the runner for this module and these optimizers
    (refusing, before training, what neither Lightning ran)."""
    # Lightning 1.x's runners and checks: imported when a fit starts, not with the Trainer.
    from trainmesh.trainer.lightning1 import optimizer_turns, tbptt

    manual = ctx.state.manual_backward is not None  # the module steps its optimizers itself
    _start_turns(ctx, manual)
    # Lightning 1.x's training_step(batch, batch_idx, optimizer_idx): once per optimizer where there are several
    turns = optimizer_turns.plan_turns(ctx, manual)
    # Lightning 1.x's truncated_bptt_steps: each batch split along time, a step per split (and optimizer)
    splits = tbptt.plan_splits(ctx.state.module, turns)
    arguments = splits[0] if splits is not None else turns  # how training_step is called: 1.x's arguments
    several = turns is not None and turns.turns
    steps = OptimizerSteps(
        ctx, accumulate, manual=manual, through_hook=several or splits is not None, training_step=arguments
    )
    if splits is not None:  # 1.9's nesting: the optimizers' turns inside each split
        return tbptt.TruncatedBackprop(steps, splits)
    if turns is not None and several:
        return optimizer_turns.OptimizerTurns(steps, turns)
    return ManualRunner(steps) if manual else AutomaticRunner(steps)


def check_before_fit(state: LoopState, runtime: Runtime, *, manual: bool) -> None:
    """Before training: refuse a Lightning 1.x loop the run cannot train (lightning1/tbptt.py)."""
    from trainmesh.trainer.lightning1 import tbptt

    tbptt.check_truncated_backprop(state.module, runtime, manual=manual, optimizers=len(state.optimizers))


def epoch_scheduler_due(state: LoopState, scheduler: Any) -> bool:
    """Whether an epoch-interval scheduler steps at this epoch's end (Lightning 1.x's optimizer
    frequencies decide it: lightning1/optimizer_turns.py; always otherwise)."""
    from trainmesh.trainer.lightning1 import optimizer_turns

    return optimizer_turns.epoch_scheduler_due(state, scheduler)


def _start_turns(ctx: LoopContext, manual: bool) -> None:
    """The optimizers Lightning 1.x's optimizer_idx hooks are indexed in (lightning1/optimizer_hooks.py):
    the first is in turn unless several take turns; manual_backward's has none (1.x passed None)."""
    turn, optimizers = ctx.hooks.optimizer_turn, [o.optimizer for o in ctx.state.optimizers]
    turn.optimizers = optimizers
    turn.current = None if manual or not optimizers else (optimizers[0], 0)
    turn.native_amp = ctx.runtime.precision.name in ("16-mixed", "bf16-mixed")
