"""The values a step passes between the loop and the strategy that owns the step.

The loop knows the module's hooks (``training_step_end``, how a loss is read from an output,
what to check before backward); the strategy knows where forward and backward run (through
DDP, on chunks of the batch, inside a pipeline schedule). ``StepHooks`` carries the first to
the second, ``StepResult`` brings the step's outcome back.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, ContextManager

import torch


def no_chunk_scope(chunk: Any) -> ContextManager[Any]:
    """The chunk scope of a step whose batch is not split."""
    return contextlib.nullcontext()


def whole_output(output: Any) -> Any:
    """``combine`` for a strategy whose step output is already one (not per device)."""
    return output


def _loss_entry(output: Any) -> torch.Tensor:
    return output["loss"] if isinstance(output, dict) else output


def _plain_backward(loss: torch.Tensor) -> None:
    loss.backward()


def _no_check(loss: torch.Tensor) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class StepHooks:
    """What the loop wants done with a step's output; the strategy decides where it happens.

    >>> hooks = StepHooks(step_end=lambda out: {"loss": out["loss"].sum()})
    """

    # The module's ``*_step_end`` (sees every device's output); None: the strategy combines
    # the pieces itself (dp/ddp2: the mean of the chunks' losses).
    step_end: Callable[[Any], Any] | None = None
    # The loss tensor in the (combined) output; the loop checks it and says what was wrong.
    loss_of: Callable[[Any], torch.Tensor] = _loss_entry
    # Called with the loss; the loop scales it (precision, accumulation) and checks it first.
    backward: Callable[[torch.Tensor], None] = _plain_backward
    # Entered around each chunk's call when a batch is split across devices (dp, ddp2), so
    # that ``self.log`` weighs a value by its chunk's size; called from the chunk's thread.
    chunk_scope: Callable[[Any], ContextManager[Any]] = no_chunk_scope
    # A strategy whose schedule runs backward itself (pipeline) cannot call ``backward``: it
    # divides each loss by ``loss_divisor`` (the accumulation window) before the schedule
    # backpropagates it, and calls ``check_loss`` on the step's loss once every rank has it.
    loss_divisor: int = 1
    check_loss: Callable[[torch.Tensor], None] = _no_check
    # Manual optimization: training_step runs its own backward calls (``manual_backward``), the
    # strategy runs none. A strategy that must act before each of them (DDP prepares its
    # reducer for that loss) enters ``backward_scope(prepare)`` around the step; None: automatic.
    backward_scope: Callable[[Callable[[torch.Tensor], None]], ContextManager[Any]] | None = None


@dataclasses.dataclass(frozen=True)
class StepResult:
    """A training step's outcome: the loss (None on ranks that have none, such as pipeline
    stages before the last) and the step's output."""

    loss: torch.Tensor | None
    output: Any


def run_train_step(forward: Callable[[], Any], *, combine: Callable[[Any], Any], hooks: StepHooks,
                   autocast: ContextManager[Any], no_sync: ContextManager[Any] | None) -> StepResult:
    """Forward, ``*_step_end`` (or ``combine``), the loss and backward: one step of a strategy
    whose forward and backward are separate calls. ``no_sync`` skips the gradient
    synchronisation (an accumulation micro-batch)."""
    with no_sync if no_sync is not None else contextlib.nullcontext():
        with autocast:
            output = forward()
            output = hooks.step_end(output) if hooks.step_end is not None else combine(output)
        loss = hooks.loss_of(output)
        hooks.backward(loss)
    return StepResult(loss, output)


def run_eval_step(forward: Callable[[], Any], *, hooks: StepHooks, autocast: ContextManager[Any]) -> Any:
    """An evaluation step's output, through the module's ``*_step_end`` when it has one."""
    with autocast:
        output = forward()
        return hooks.step_end(output) if hooks.step_end is not None else output
