"""Which checkpoint entries hold tensors a strategy may write shard by shard."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class CheckpointKeys:
    """The entries of a checkpoint that hold the model's and the optimizers' state. The caller
    (the Trainer) names them; checkpoint code stores whatever entries it is handed.

    >>> CheckpointKeys(model="state_dict", optimizers="optimizer_states").model
    'state_dict'
    """

    model: str
    optimizers: str
