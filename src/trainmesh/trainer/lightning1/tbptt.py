"""Lightning 1.x's truncated backpropagation through time: ``truncated_bptt_steps = k`` on the module.

pytorch-lightning 1.9.5 (``loops/batch/training_batch_loop.py``, ``loops/optimization/optimizer_loop.py``,
``loops/utilities.py``, ``core/module.py``) runs each training batch, after ``on_train_batch_start``, as::

    splits = module.tbptt_split_batch(batch, k)     # default: every tensor cut along dim 1 (time) in pieces of k
    hiddens = None
    for split in splits:                            # each as a batch of its own for automatic optimization:
        closure = training_step(split, batch_idx, hiddens) -> {"loss": ..., "hiddens": ...}, the loss divided
                  by accumulate_grad_batches, [a window's first batch: on_before_zero_grad, optimizer_zero_grad],
                  backward
        accumulation batch: closure()  |  step batch: optimizer_step(..., closure); global_step += 1
        hiddens = detached(output["hiddens"])
    step-interval schedulers: once, after the batch (not per split)

So a step batch steps the optimizer once per split (``global_step`` counts them), and at a window's first
batch every split zeroes the gradients before its backward (at an accumulation batch only the last split's
gradients reach the step: 1.9's behaviour, kept). ``on_train_batch_end`` gets the splits' outputs (each
``{"loss": loss / accumulate_grad_batches, **other keys}``, without ``hiddens``), ``training_epoch_end`` a
list of those. Lightning 2.0 removed it (the 2.x way is manual optimization), so it comes with one
deprecation line; it runs under the strategies where its weights were checked against 1.9.5's.

With several optimizers (``training_step(batch, batch_idx, optimizer_idx, hiddens)``), 1.9.5 nests its
optimizer loop inside the split loop: for each split, each active optimizer takes its turn
(optimizer_turns.py: toggled, the closure, its step), and ``hiddens`` is one value carried from each
``training_step`` to the next (the second optimizer's turn gets what the first returned on this split, the
next split's first turn what the last returned), None again at each batch's start. Each split's output is
then the list of its turns' outputs.
"""

from __future__ import annotations

import collections.abc
import functools
from typing import TYPE_CHECKING, Any

import torch

from trainmesh.strategies.step import StepResult
from trainmesh.trainer.lightning1.optimizer_turns import OptimizerTurns, StepArguments
from trainmesh.trainer.optimization.owner import OptimizerSteps
from trainmesh.utilities.collections import apply_to_tensors
from trainmesh.utilities.rank_zero import rank_zero_deprecation, rank_zero_warn
from trainmesh.utilities.signature_utils import is_param_in_hook_signature

if TYPE_CHECKING:
    from trainmesh.runtime import Runtime

_INSTEAD = (
    "the 2.x way is manual optimization (self.automatic_optimization = False; in training_step split the batch "
    "along time yourself, carry the hidden state, detached, from one piece to the next, and call "
    "self.manual_backward(loss), opt.step(), opt.zero_grad() per piece)"
)


def split_steps(module: Any) -> Any:
    """The module's ``truncated_bptt_steps`` where it asks for 1.x's loop, else 0.

    Lightning 2.x has no such attribute: its TBPTT page sets ``self.truncated_bptt_steps = 10`` as the
    program's own number and splits the batch in a manual ``training_step(batch, batch_idx)``. 1.9.5
    passed ``hiddens`` to every split's ``training_step`` (a step without it stopped with a TypeError),
    so a ``training_step`` that takes no ``hiddens`` (nor ``*args``) is such a 2.x program: its attribute
    is left to it, as Lightning 2.x leaves it."""
    steps = getattr(module, "truncated_bptt_steps", 0)
    if steps and not is_param_in_hook_signature(module.training_step, "hiddens"):
        return 0
    return steps


def check_truncated_backprop(module: Any, runtime: Runtime, *, manual: bool, optimizers: int) -> None:
    """Before training: refuse what 1.9's loop is not run for here (among it, a strategy whose capabilities
    do not include Lightning 1.x's loops), and say once that it runs (1.x, deprecated)."""
    strategy = runtime.strategy_name
    steps, name = split_steps(module), type(module).__name__
    if not steps:
        if callable(getattr(type(module), "tbptt_split_batch", None)):
            rank_zero_warn(
                f"{name}.tbptt_split_batch is not called: Lightning 1.x called it only where truncated_bptt_steps > 0 "
                f"(it is {steps!r}). Set self.truncated_bptt_steps, or remove the method"
            )
        return
    why = None
    if not isinstance(steps, int) or steps < 0:
        why = "it must be a positive int (the number of time steps per split)"
    elif manual:
        why = "trainmesh runs it in automatic optimization only; with automatic_optimization = False split the batch in training_step yourself"
    elif not runtime.capabilities.lightning1_loops:  # weights checked against 1.9.5 (test_tbptt.py)
        why = f"it runs under strategy 'single' or 'ddp', where its weights are checked against Lightning 1.9's; not under '{strategy}'"
    if why is not None:
        raise ValueError(
            f"{name}.truncated_bptt_steps = {steps!r} (Lightning 1.x's truncated backpropagation through time): "
            f"{why}. Otherwise, {_INSTEAD}"
        )
    rank_zero_deprecation(
        f"{name}.truncated_bptt_steps = {steps}: Lightning 1.x's truncated backpropagation through time (the batch "
        f"split along time by tbptt_split_batch, training_step(batch, batch_idx, hiddens) and an optimizer step per "
        f"split), removed in Lightning 2.0. trainmesh runs it as 1.9 did; {_INSTEAD}"
    )


def plan_splits(module: Any, arguments: StepArguments | None) -> tuple[StepArguments, int] | None:
    """At an epoch's start: 1.x's ``training_step`` arguments with ``hiddens`` (after ``optimizer_idx`` where
    it declares one: ``arguments``) and the split size where the module sets truncated_bptt_steps (the
    runner's, then: ``TruncatedBackprop``); None otherwise."""
    steps = split_steps(module)
    if not steps:
        return None
    arguments = arguments if arguments is not None else StepArguments(takes_index=False)
    arguments.takes_hiddens = True
    return arguments, steps


class TruncatedBackprop:
    """One epoch of 1.9's split loop: a runner on the step's owner (train, closure, step); with several
    optimizers, their turns (``turns``) inside each split."""

    manual = False

    def __init__(self, owner: OptimizerSteps, plan: tuple[StepArguments, int]) -> None:
        self.owner, (self.arguments, self.steps) = owner, plan
        # several optimizers taking turns in each split; each turn's output checked inside its closure (as 1.9)
        self.turns = OptimizerTurns(owner, self.arguments, check_output=self._hiddens_of) if plan[0].turns else None
        module = owner.module
        self.optimizer = owner.ctx.state.optimizers[0]
        self.optimizer_step = owner.optimizer_step_hook if owner.hooks.custom_step else None
        self.split = module.tbptt_split_batch if callable(getattr(module, "tbptt_split_batch", None)) else split_batch

    def run(self, batch: Any, batch_idx: int, *, steps_now: bool) -> StepResult:
        if self.turns is not None:
            return self._run_turns(self.turns, batch, batch_idx, steps_now=steps_now)
        owner = self.owner
        owner.backward.loss_check.batch_idx = batch_idx
        outputs, result = [], None
        self.arguments.hiddens = None
        try:
            for split in self.split(batch, self.steps):
                train = functools.partial(self._train, split, batch_idx, steps_now)
                # 1.9's closure zeroes at every split of a window's first batch, after training_step
                owner.arm_zero_grad(batch_idx, [self.optimizer])
                if steps_now:
                    result = owner.step_one(self.optimizer, batch_idx, train, self.optimizer_step)
                    owner.count_steps(1)
                else:
                    result = train()
                assert result is not None  # the closure trained (checked)
                self.arguments.hiddens = self._hiddens_of(result.output)
                outputs.append(self._output_of(result))
        finally:
            self.arguments.hiddens = None  # no graph nor tensor kept past the batch
        if steps_now:
            owner.step_schedulers(batch_idx)
        assert result is not None, f"{type(owner.module).__name__}.tbptt_split_batch returned no split"
        return StepResult(result.loss, outputs, None)

    def _run_turns(self, turns: OptimizerTurns, batch: Any, batch_idx: int, *, steps_now: bool) -> StepResult:
        """1.9's nesting: for each split, each active optimizer's turn; hiddens carried from turn to turn."""
        outputs, result = [], None
        self.arguments.hiddens = None
        try:
            for split in self.split(batch, self.steps):
                split_outputs, result = turns.turns(split, batch_idx, steps_now=steps_now, output_of=self._turn_output)
                outputs.append(split_outputs)
        finally:
            self.arguments.hiddens = None  # no graph nor tensor kept past the batch
        if steps_now:
            turns.step_schedulers(batch_idx)
        assert result is not None, f"{type(self.owner.module).__name__}.tbptt_split_batch returned no split"
        return StepResult(result.loss, outputs, None)

    def _turn_output(self, result: StepResult) -> dict[str, Any]:
        self.arguments.hiddens = self._hiddens_of(result.output)  # what the next training_step gets (1.9's)
        return self._output_of(result)

    def finish_window(self, batch_idx: int) -> None:
        """The epoch ended inside an accumulation window: one step on what was accumulated."""
        if self.turns is not None:
            self.turns.finish_window(batch_idx)
            return
        self.owner.step_one(self.optimizer, batch_idx, None, self.optimizer_step)
        self.owner.count_steps(1)
        self.owner.step_schedulers(batch_idx)

    def _train(self, split: Any, batch_idx: int, sync_grads: bool) -> StepResult:
        result: StepResult = self.owner.train(split, batch_idx, sync_grads)
        if result.num_tokens is not None:
            raise ValueError(
                f"{type(self.owner.module).__name__}.training_step returned num_tokens with truncated_bptt_steps: "
                "Lightning 1.x's splits each step on a mean loss. Return a mean loss"
            )
        self._hiddens_of(result.output)  # checked inside the closure, before the optimizer steps (as 1.9)
        return result

    def _hiddens_of(self, output: Any) -> Any:
        # 1.9's _extract_hiddens: required, and detached so the next split does not backpropagate into this one
        if not isinstance(output, dict) or "hiddens" not in output:
            raise ValueError(
                f"{type(self.owner.module).__name__}.truncated_bptt_steps is set but training_step did not return "
                '{"loss": ..., "hiddens": ...}: return the hidden state for the next split under "hiddens" (None to '
                "start it afresh)"
            )
        return apply_to_tensors(output["hiddens"], lambda t: t.detach())

    def _output_of(self, result: StepResult) -> dict[str, Any]:
        """1.9's ClosureResult.asdict(): the loss backward ran on (divided by the window), the other keys but hiddens."""
        output = result.output
        loss = output["loss"] / self.owner.accumulate
        extra = {key: value for key, value in output.items() if key not in ("loss", "hiddens")}
        return {"loss": loss.detach().clone(), **extra}


def split_batch(batch: Any, split_size: int) -> list[Any]:
    """Lightning 1.x's default ``tbptt_split_batch``: each tensor of the batch cut along dim 1 (time),
    each sequence's items along their dim 0, in pieces of ``split_size``; other items are left out."""
    time_dims = [len(x[0]) for x in batch if isinstance(x, (torch.Tensor, collections.abc.Sequence))]
    if not time_dims or any(t != time_dims[0] for t in time_dims):
        raise ValueError(
            "truncated_bptt_steps: the default tbptt_split_batch cuts every tensor of a list/tuple batch along "
            f"dim 1 (time), which must be equally long in all of them (got lengths {time_dims}). Override "
            "tbptt_split_batch(batch, split_size) to split this batch"
        )
    splits = []
    for t in range(0, time_dims[0], split_size):
        split: list[Any] = []
        for x in batch:
            if isinstance(x, torch.Tensor):
                split.append(x[:, t : t + split_size])
            elif isinstance(x, collections.abc.Sequence):
                split.append([item[t : t + split_size] for item in x])
        splits.append(split)
    return splits
