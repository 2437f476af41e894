"""What a manual-optimization step through DDP needs from DDP's reducer: gradient sync turned on
inside ``training_step`` only (``sync_in_hook``), the reducer prepared for each ``manual_backward``'s
loss (``ReducerSync``, ``prepare_reducer``), and whether a module needs DDP's
``find_unused_parameters`` for Lightning 1.x's per-optimizer steps (``steps_each_optimizer``)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainmesh.strategies.step import ManualSync


def sync_in_hook(module: DistributedDataParallel) -> Callable[[Any], AbstractContextManager[Any]]:
    """The chunk scope of a manual step through DDP: gradient sync on inside training_step (the
    forward around it runs with sync off), where ``no_backward_sync`` may turn it off."""

    @contextlib.contextmanager
    def sync_in_hook(chunk: Any) -> Iterator[None]:
        module.require_backward_grad_sync = True
        try:
            yield
        finally:
            module.require_backward_grad_sync = False

    return sync_in_hook


class ReducerSync(ManualSync):
    """Manual optimization through DDP: before each ``manual_backward``, the reducer is prepared
    for that loss (``prepare_reducer``)."""

    def __init__(self, module: DistributedDataParallel) -> None:
        self._module = module

    def backward(self, loss: torch.Tensor, run: Callable[[torch.Tensor], None]) -> None:
        prepare_reducer(self._module, loss)
        run(loss)


def steps_each_optimizer(module: nn.Module) -> bool:
    """Whether ``training_step`` declares Lightning 1.x's ``optimizer_idx`` (run once per optimizer, the
    others' parameters frozen: trainer/optimizer_turns.py)."""
    try:
        training_step = inspect.getattr_static(type(module), "training_step")
        return "optimizer_idx" in inspect.signature(training_step).parameters
    except (AttributeError, TypeError, ValueError):
        return False


def prepare_reducer(module: DistributedDataParallel, loss: torch.Tensor, *, always: bool = False) -> None:
    """Tell DDP's reducer which parameters ``loss`` reaches before its backward runs: the others
    (another optimizer's, frozen by toggle_optimizer) count as ready, so the all-reduce ends.
    Skipped inside ``no_backward_sync`` (DDP's ``require_backward_grad_sync`` off), unless
    ``always`` (ddp2's lockstep decides that itself)."""
    if not torch.is_grad_enabled() or not (always or module.require_backward_grad_sync):
        return  # inside no_backward_sync: gradients stay local
    from torch.nn.parallel.distributed import _find_tensors

    module.require_forward_param_sync = True  # the next forward broadcasts buffers again
    reducer = module.reducer
    reducer._rebuild_buckets()
    reducer.prepare_for_backward(
        list(_find_tensors(loss)) if module.find_unused_parameters else []  # type: ignore[no-untyped-call]  # torch's own, unannotated
    )
