"""torch's in-place draw methods (``x.normal_()``) in a step under several processes: one process's rows.

torch_draws.py maps torch's random *functions* (``torch.randn_like``) drawn in a step of the program's own;
a tensor's own draw methods went past it. A user's denoising ``train_step`` noising its inputs with
``x + 0.3 * torch.empty_like(x).normal_()`` drew, on every process, the first rows of what one process
draws at the global batch, so its samples got other noise than in one process, silently (2 processes of 16
ended 3.2e-2 apart, History, from Keras' own fit at 32).

Within a training or evaluation step, each of these methods called on a batch-shaped tensor (first
dimension ``k`` times this process's batch) on torch's global generator (no ``generator=``) draws into a
tensor of the global batch's shape and copies this process's rows (draws.StepRows) into the tensor: the
numbers one process draws for those samples, and torch's generator moves on as one process's. A tensor
probability of ``bernoulli_`` (one per entry) is put at this process's rows first. The step probe
(step_probe.py) records and replays them as it does torch's functions (``taped``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainmesh.keras import draws

# Each draws one number per entry of the tensor from torch's generator, whatever the tensor holds.
METHODS = ("normal_", "uniform_", "bernoulli_", "exponential_", "log_normal_", "cauchy_", "geometric_", "random_")


def _first(tensor: torch.Tensor) -> int | None:
    return int(tensor.shape[0]) if tensor.dim() else None


def _mapped(method: Callable[..., Any], rows: draws.StepRows, name: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def draw(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        first = _first(self)
        if draws._drawing[0] or first is None:  # Keras' own draw; a scalar
            return method(self, *args, **kwargs)
        parts = draws._parts(rows, first)
        if not parts:
            return method(self, *args, **kwargs)
        if rows.refusal is not None:
            draws._refuse(rows, name, module="torch.Tensor")
        total, mine = rows.rows(parts)
        whole, mine = draws.global_batch_like(self, parts * total), mine.to(self.device)

        def at_rows(value: Any) -> Any:  # bernoulli_'s per-entry probabilities: this process's at its rows
            if not isinstance(value, torch.Tensor) or value.dim() != self.dim() or value.shape[0] != first:
                return value
            return draws.global_batch_like(value, len(whole)).index_put((mine,), value)

        draws._drawing[0] = True
        try:
            method(whole, *(at_rows(a) for a in args), **{k: at_rows(v) for k, v in kwargs.items()})
        finally:
            draws._drawing[0] = False
        self.copy_(whole[mine])  # as the method itself: the tensor's old value gets no gradient
        return self

    return draw


@contextlib.contextmanager
def _methods_as(wrap: Callable[[Callable[..., Any], str], Callable[..., Any]]) -> Iterator[None]:
    """torch.Tensor's draw methods replaced by ``wrap(method, name)`` within the block (torch's own class,
    for the block only: the program's tensors are torch's), restored after."""
    own = {name: vars(torch.Tensor)[name] for name in METHODS if name in vars(torch.Tensor)}
    for name in METHODS:
        setattr(torch.Tensor, name, wrap(getattr(torch.Tensor, name), name))
    try:
        yield
    finally:
        for name in METHODS:
            if name in own:
                setattr(torch.Tensor, name, own[name])
            else:
                delattr(torch.Tensor, name)


@contextlib.contextmanager
def tensor_methods_at_the_global_batch(rows: draws.StepRows) -> Iterator[None]:
    """torch.Tensor's draw methods map batch-shaped draws to ``rows`` within the block (several processes)."""
    if rows.runtime.world_size == 1:
        yield
        return
    with _methods_as(lambda method, name: _mapped(method, rows, f"torch.Tensor.{name}")):
        yield


def _taped(method: Callable[..., Any], tape: Any, name: str) -> Callable[..., Any]:
    @functools.wraps(method)
    def draw(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if tape.inside:  # Keras' own calls
            return method(self, *args, **kwargs)
        if tape.replaying is not None:
            recorded = tape.rows_of(name, tape.next(0, name), _first(self))
            self.copy_(recorded)
            return self
        tape.saw_generator(kwargs.get("generator"))
        method(self, *args, **kwargs)
        tape.draws.append((name, self.detach().clone()))
        return self

    return draw


@contextlib.contextmanager
def taped(tape: Any) -> Iterator[None]:
    """Within the block, torch.Tensor's draw methods draw through ``tape`` (step_probe._Tape)."""
    with _methods_as(lambda method, name: _taped(method, tape, f"torch.Tensor.{name}")):
        yield


def replayed_names() -> tuple[str, ...]:
    """The tape's names of these draws, each replayed by rows."""
    return tuple(f"torch.Tensor.{name}" for name in METHODS)
