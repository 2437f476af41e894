"""Which checkpoint entries hold tensors a strategy may write shard by shard, and whether an optimizer's entry is torch's."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class CheckpointKeys:
    """The entries of a checkpoint that hold the model's and the optimizers' state. The caller
    (the Trainer) names them; checkpoint code stores whatever entries it is handed.

    >>> CheckpointKeys(model="state_dict", optimizers="optimizer_states").model
    'state_dict'
    """

    model: str
    optimizers: str


def holds_state(optimizer: Any) -> bool:
    """Whether ``optimizer``'s saved entry is torch's (``state`` and ``param_groups``): False for the
    stand-in a module whose ``configure_optimizers`` returned None steps (Lightning's
    ``_MockOptimizer``), whose state dict is ``{}``, stored as it is, as Lightning stores it; torch's
    DCP state-dict functions need a ``"state"`` entry (``KeyError: 'state'``)."""
    return "state" in optimizer.state_dict()
