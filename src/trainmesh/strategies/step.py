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
from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch


class StepModule(Protocol):
    """The user's module as a strategy calls its hooks directly (its trainmesh ``Module`` methods);
    a strategy's signatures take ``nn.Module``, and it casts where it calls these."""

    def training_step(self, batch: Any, batch_idx: int) -> Any: ...
    def pipeline_input(self, batch: Any) -> Any: ...
    def pipeline_kwargs(self, batch: Any) -> dict[str, Any]: ...


def no_chunk_scope(chunk: Any) -> AbstractContextManager[Any]:
    """The chunk scope of a step whose batch is not split."""
    return contextlib.nullcontext()


def whole_output(output: Any) -> Any:
    """``combine`` for a strategy whose step output is already one (not per device)."""
    return output


def _loss_entry(output: Any) -> torch.Tensor:
    loss: torch.Tensor = output["loss"] if isinstance(output, dict) else output
    return loss


def tokens_in(output: Any, *, owner: str = "training_step") -> torch.Tensor | None:
    """The count of valid tokens a step's output reports (``{"loss": summed, "num_tokens": n}``),
    as a 0-dim float tensor on the loss's device; None when it reports none (a mean loss).

    >>> tokens_in({"loss": torch.tensor(6.0), "num_tokens": 3})
    tensor(3., dtype=torch.float64)
    """
    count = output.get("num_tokens") if isinstance(output, dict) else None
    if count is None:
        return None
    if isinstance(count, torch.Tensor):
        usable = count.numel() == 1 and not count.is_complex() and count.dtype != torch.bool
    else:
        usable = isinstance(count, int) and not isinstance(count, bool) and count >= 0
    if not usable:
        shown = (
            f"a tensor of shape {tuple(count.shape)} and dtype {count.dtype}"
            if isinstance(count, torch.Tensor)
            else repr(count)
        )
        raise ValueError(
            f"{owner} returned num_tokens={shown}; give the count of valid tokens in this (micro-)batch, the "
            "ones the summed loss adds up: a non-negative int or a one-element tensor, e.g. "
            "(targets != ignore_index).sum()"
        )
    loss = output.get("loss")
    device = loss.device if isinstance(loss, torch.Tensor) else torch.device("cpu")
    # float64 counts stay exact far past any batch's tokens (MPS has no float64).
    dtype = torch.float32 if device.type == "mps" else torch.float64
    return torch.as_tensor(count).detach().to(device=device, dtype=dtype).reshape(())


def _plain_backward(loss: torch.Tensor) -> None:
    loss.backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward is unannotated


def _no_check(loss: torch.Tensor) -> None:
    return None


class ManualSync:
    """How the manual-optimization calls of a ``training_step`` meet the strategy that runs it.

    ``backward(loss, run)`` is a ``manual_backward`` (``run`` backpropagates through the precision
    and the backward hooks); ``once(action, what=...)`` is a call that changes what every part of
    the step shares: an optimizer step or zero_grad, toggling, clipping, a scheduler step.
    This base runs each as it comes, for a step that runs ``training_step`` once per process.
    Strategies that do more subclass it: DDP prepares its reducer before each backward
    (``ddp_manual_sync.ReducerSync``); dp and ddp2 run ``training_step`` once per chunk of the batch, the
    chunks meeting at each call (``lockstep.Lockstep``).

    >>> ManualSync().once(lambda: 3, what="opt.step()")
    3
    """

    # How many parts of the step run ``training_step`` (dp's chunks): above 1, what the module
    # calls on an object they share (a scheduler's ``step()``) must also go through ``once``.
    parts = 1

    def backward(self, loss: torch.Tensor, run: Callable[[torch.Tensor], None]) -> None:
        run(loss)

    def once(self, action: Callable[[], Any], *, what: str) -> Any:
        return action()

    def step(
        self, step: Callable[[Callable[[], Any] | None], Any], closure: Callable[[], Any] | None, *, what: str
    ) -> Any:
        """An optimizer step, ``step(closure)``; the closure (training_step's forward and
        manual_backward for this step, when given) is this process's."""
        return step(closure)


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
    # The count of valid tokens the output reports (``"num_tokens"``): its loss is then a sum
    # over them, backpropagated as it is (never divided by the accumulation window or the
    # micro-batch count), and the gradients are divided by the global count before the
    # optimizer steps (``Runtime.normalize_gradients``). None: a mean loss.
    count_of: Callable[[Any], torch.Tensor | None] = tokens_in
    # Called with the loss (divided by ``loss_divisor`` when it is a mean); the loop scales it
    # for the precision and runs backward.
    backward: Callable[[torch.Tensor], None] = _plain_backward
    # Entered around each chunk's call when a batch is split across devices (dp, ddp2), so
    # that ``self.log`` weighs a value by its chunk's size; called from the chunk's thread.
    chunk_scope: Callable[[Any], AbstractContextManager[Any]] = no_chunk_scope
    # A mean loss is divided by ``loss_divisor`` (the accumulation window) before backward;
    # ``check_loss`` sees it undivided, before backward (a strategy whose schedule runs backward
    # itself, the pipeline, calls it on the step's loss once every rank has it).
    loss_divisor: int = 1
    check_loss: Callable[[torch.Tensor], None] = _no_check
    # Manual optimization: training_step runs its own backward calls (``manual_backward``) and
    # optimizer steps, the strategy runs none. It enters ``backward_scope(sync)`` around the step,
    # ``sync`` saying how those calls meet it (``ManualSync``); None: automatic optimization.
    backward_scope: Callable[[ManualSync], AbstractContextManager[Any]] | None = None
    # How the module's step hook is called: ``call(method, batch, batch_idx, *extra)`` with the hook's
    # bound method (a replica's, under dp); the loop builds it once from the hook's signature (a hook
    # taking fewer arguments, Lightning 1.x's optimizer_idx and hiddens). None: ``method(batch, ...)``.
    call: Callable[..., Any] | None = None
    # Lightning 2.x's automatic optimization skips the backward of a batch whose training_step returned
    # None: called instead of the loss's check and backward (the loop's zero_grad still runs there).
    # None: such an output goes to ``loss_of`` (an error there, as under several processes).
    skipped: Callable[[], None] | None = None


@dataclasses.dataclass(slots=True)  # not frozen: a frozen __init__ sets each field through object.__setattr__
class StepResult:
    """A training step's outcome: the loss (None on ranks that have none, such as pipeline
    stages before the last) and the step's output; ``num_tokens``, where the loss is a sum over
    valid tokens, their count in the step (every micro-batch and chunk of this process's batch)."""

    loss: torch.Tensor | None
    output: Any
    num_tokens: torch.Tensor | None = None


def call_hook(module: Any, hook: str, args: tuple[Any, ...], call: Callable[..., Any] | None) -> Any:
    """``module.<hook>(*args)``, through ``call`` (``StepHooks.call``) where the loop gives one."""
    method = getattr(module, hook)
    return method(*args) if call is None else call(method, *args)


def loss_to_backward(loss: torch.Tensor, num_tokens: torch.Tensor | None, divisor: int) -> torch.Tensor:
    """What backward runs on: a mean loss divided by ``divisor`` (its share of the accumulated
    mean); a summed loss as it is (the gradients are divided by the global count later)."""
    return loss / divisor if num_tokens is None and divisor > 1 else loss


def run_train_step(
    forward: Callable[[], Any],
    *,
    combine: Callable[[Any], Any],
    hooks: StepHooks,
    autocast: AbstractContextManager[Any],
    no_sync: AbstractContextManager[Any] | None,
) -> StepResult:
    """Forward, ``*_step_end`` (or ``combine``), the loss and backward: one step of a strategy
    whose forward and backward are separate calls. ``no_sync`` skips the gradient
    synchronisation (an accumulation micro-batch)."""
    if no_sync is not None:
        with no_sync:
            return run_train_step(forward, combine=combine, hooks=hooks, autocast=autocast, no_sync=None)
    # Full precision's autocast is a nullcontext: not entered, as it is on every step (each
    # context costs three Python calls, about a microsecond each between a step's kernels).
    if type(autocast) is contextlib.nullcontext:
        output = forward()
        if hooks.step_end is not None:
            output = hooks.step_end(output)
        elif combine is not whole_output:
            output = combine(output)
    else:
        with autocast:
            output = forward()
            output = hooks.step_end(output) if hooks.step_end is not None else combine(output)
    if output is None and hooks.skipped is not None:
        hooks.skipped()
        return StepResult(None, None)
    loss = hooks.loss_of(output)
    num_tokens = hooks.count_of(output)
    hooks.check_loss(loss)
    hooks.backward(loss_to_backward(loss, num_tokens, hooks.loss_divisor))
    return StepResult(loss, output, num_tokens)


def run_eval_step(forward: Callable[[], Any], *, hooks: StepHooks, autocast: AbstractContextManager[Any]) -> Any:
    """An evaluation step's output, through the module's ``*_step_end`` when it has one."""
    with autocast:
        output = forward()
        return hooks.step_end(output) if hooks.step_end is not None else output
