"""zero1's optimizer: the program's optimizer rebuilt as torch's ``ZeroRedundancyOptimizer`` (same
class, groups and options), each rank keeping only its shard of the state."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # importing it pulls in DTensor and sympy (about a second): only zero1 needs it
    from torch.distributed.optim import ZeroRedundancyOptimizer


def shard_optimizer_state(optimizer: torch.optim.Optimizer) -> ZeroRedundancyOptimizer:
    """The same optimizer (class, groups, options) with its state split across ranks."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    if isinstance(optimizer, torch.optim.LBFGS):
        # Each rank's LBFGS steps only its own shard and re-evaluates the closure (forward and
        # backward, with DDP's all-reduce) as often as its own line search needs: the ranks
        # would wait on each other's collectives for ever.
        raise ValueError(
            "strategy='zero1' cannot shard LBFGS: every rank would call the closure (forward and backward "
            "with a gradient all-reduce) a different number of times for its own shard, and the run would "
            "hang. Use strategy='ddp' with LBFGS, or a first-order optimizer (SGD, Adam, ...) with zero1"
        )

    # ZeroRedundancyOptimizer builds each rank's optimizer as ``cls(groups, **defaults)``, but
    # ``defaults`` may hold keys ``__init__`` does not take (AdamW's decoupled_weight_decay):
    # pass only the ones it takes. Every key still reaches the groups, which carry them whole.
    accepted = _init_keywords(type(optimizer))
    defaults = {k: v for k, v in optimizer.defaults.items() if accepted is None or k in accepted}
    # Parameters that take no gradient (frozen layers; Keras' moving statistics and its integer
    # dropout seed) are left out: an optimizer never changes them, ZeRO requires one dtype, and
    # after each step it broadcasts every parameter from the rank owning it, which would put
    # another rank's moving statistics over this rank's. Groups stay, even empty (schedulers
    # count them).
    groups = [
        {**group, "params": [p for p in group["params"] if p.requires_grad]}  # with initial_lr
        for group in optimizer.param_groups
    ]
    zero = ZeroRedundancyOptimizer(groups, optimizer_class=type(optimizer), **defaults)
    zero.defaults = dict(optimizer.defaults)  # groups added later get every default, as in the original
    left_out = [p for group in optimizer.param_groups for p in group["params"] if not p.requires_grad]
    if left_out:
        step = zero.step

        def step_unless_unfrozen(*args: Any, **kwargs: Any) -> Any:
            _refuse_unfrozen(left_out)
            return step(*args, **kwargs)

        zero.step = step_unless_unfrozen  # type: ignore[method-assign]
    return zero


def _refuse_unfrozen(left_out: list[torch.Tensor]) -> None:
    """A parameter frozen when zero1 sharded the optimizer and trained since: it would never move."""
    unfrozen = [tuple(p.shape) for p in left_out if p.requires_grad and p.grad is not None]
    if unfrozen:
        raise RuntimeError(
            f"{len(unfrozen)} parameter(s) of shapes {unfrozen[:4]} did not require grad when strategy='zero1' "
            "sharded the optimizer, so they are not in it, and now they have gradients: they would never "
            "be updated. Add them with optimizer.add_param_group({'params': [...]}) when you unfreeze them, "
            "or unfreeze them before fit"
        )


def _init_keywords(cls: type) -> set[str] | None:
    """The keyword arguments ``cls(...)`` takes; None when it takes any (``**kwargs``)."""
    parameters = inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]  # the class's own, on purpose
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
