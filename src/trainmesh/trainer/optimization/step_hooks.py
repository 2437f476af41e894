"""What the strategy's step is handed (``StepHooks``): how to read training_step's output (its loss
and token count, with the errors a wrong output gets), backward, ``training_step_end``, the chunk scope."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from trainmesh.strategies.step import StepHooks, tokens_in
from trainmesh.trainer import manual_optimization
from trainmesh.trainer.optimization.closure import LossBackward
from trainmesh.utilities.exceptions import MisconfiguredType, MisconfiguredValue
from trainmesh.utilities.rank_zero import WarningCache

if TYPE_CHECKING:
    from trainmesh.trainer.loop_context import LoopContext


def step_hooks_for(
    ctx: LoopContext,
    module: Any,
    backward: LossBackward,
    accumulate: int,
    *,
    zero_in_window: bool,
    call: Callable[..., Any] | None,
) -> StepHooks:
    """``call``: how the strategy calls training_step (``StepHooks.call``: its arguments, built from its signature)."""
    hooks, log_collector, manual_backward = ctx.hooks, ctx.state.log_collector, ctx.state.manual_backward
    processes = ctx.runtime.world_size
    reader = _OutputReader(module, processes)
    step_hooks = StepHooks(
        step_end=hooks.step_end("training_step_end"),
        loss_of=reader.loss_of,
        count_of=reader.count_of,
        # Where nothing zeroes inside the window, backward itself: one call fewer on every step.
        backward=backward if zero_in_window else backward.backward,
        chunk_scope=log_collector.chunk_scope,
        loss_divisor=accumulate,
        check_loss=backward.loss_check.check,
        call=call,
        # Lightning 2.x skips such a batch on one process only (several: loss_of raises its error)
        skipped=functools.partial(_skip_batch, backward) if processes == 1 else None,
    )
    if manual_backward is None:
        return step_hooks
    return manual_optimization.manual_step_hooks(step_hooks, manual_backward, module)


# Lightning 2.6's words (loops/optimization/automatic.py: Closure.closure, _AutomaticOptimization._training_step)
SKIPPED_WARNING = "`training_step` returned `None`. If this was on purpose, ignore this warning..."
SKIP_REFUSED = (
    "Skipping the `training_step` by returning None in distributed training is not supported."
    " It is recommended that you rewrite your training logic to avoid having to skip the step in the first"
    " place."
)
# Lightning's Closure.warning_cache is a class attribute: the warning comes once per process, not per fit.
_SKIPPED_WARNINGS = WarningCache()


def _skip_batch(backward: LossBackward) -> None:
    """training_step returned None on one process: Lightning 2.x warns (once), zeroes where its closure
    would, and runs no backward; the optimizer still steps (on no new gradients) and global_step counts it."""
    _SKIPPED_WARNINGS.warn(SKIPPED_WARNING)
    backward.skip()


class _OutputReader:
    """Reads training_step's output for the strategy's step (``StepHooks.loss_of``/``count_of``):
    bound methods with a fast path for the usual output, a scalar loss tensor, since they run on
    every step; anything else goes through ``loss_of``/``tokens_in`` and their errors."""

    def __init__(self, module: Any, processes: int = 1) -> None:
        self.module, self.owner, self.processes = module, f"{type(module).__name__}.training_step", processes

    def loss_of(self, output: Any) -> torch.Tensor:
        if type(output) is torch.Tensor and output.requires_grad and output.numel() == 1:
            return output
        if output is None and self.processes > 1:
            raise RuntimeError(SKIP_REFUSED)
        return loss_of(output, self.module)

    def count_of(self, output: Any) -> torch.Tensor | None:
        return tokens_in(output, owner=self.owner) if isinstance(output, dict) else None


def loss_of(output: Any, module: Any) -> torch.Tensor:
    """The loss in what training_step returned, or an error saying what was wrong with it."""
    name = type(module).__name__
    if isinstance(output, torch.Tensor):
        loss = output
    elif isinstance(output, Mapping):  # a dict, or any Mapping (Lightning's ClosureResult takes both)
        if output.get("loss") is None:
            # Lightning's MisconfigurationException words first; a ValueError too (trainmesh's before)
            raise MisconfiguredValue(
                "In automatic_optimization, when `training_step` returns a dict, the 'loss' key needs to be present. "
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
        raise MisconfiguredType(  # Lightning's words first; a TypeError too (trainmesh's before)
            "In automatic optimization, `training_step` must return a Tensor, a dict, or None (where the step will"
            f" be skipped). {name}.training_step returned {type(output).__name__}: return the loss tensor or a dict"
            " with 'loss'"
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
