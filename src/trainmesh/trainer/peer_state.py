"""What a replica group recovering from a live peer takes besides the weights and optimizer state
(``Trainer(fault_tolerance=...)``): the step count, which ends the run at ``max_steps`` together
with the others, and the LR schedulers, which set the next steps' rates.

The epoch and the place in it stay the group's own: a group started again reads its share of the
data from the beginning of an epoch, as torchft's own sampler does.
"""

from __future__ import annotations

from typing import Any

from trainmesh.runtime import Runtime
from trainmesh.trainer.loop_state import LoopState


def share_loop_state(runtime: Runtime, state: LoopState, *, fault_tolerant: bool) -> None:
    """Offer ``state``'s step count and schedulers to recovering peers (a no-op without fault tolerance)."""
    epochly = [type(c.scheduler).__name__ for c in state.lr_scheduler_configs if c.interval != "step"]
    if fault_tolerant and epochly:
        # Each group counts its own epochs: the groups' rates would differ on the same averaged gradient.
        raise ValueError(
            f"fault_tolerance: the schedulers {epochly} step per epoch, and each replica group counts its own "
            "epochs (a group started again begins one anew), so the groups would train at different rates. "
            'Return them with "interval": "step" from configure_optimizers'
        )

    def loop_state() -> dict[str, Any]:
        return {
            "global_step": state.global_step,
            "lr_schedulers": [config.scheduler.state_dict() for config in state.lr_scheduler_configs],
        }

    def load_loop_state(peer: dict[str, Any]) -> None:
        state.global_step = peer["global_step"]
        for config, saved in zip(state.lr_scheduler_configs, peer["lr_schedulers"]):
            config.scheduler.load_state_dict(saved)

    runtime.trainer_port.share_state_with_peers("trainer", loop_state, load_loop_state)


def check_fault_tolerant_limits(fault_tolerance: Any, *, max_steps: int, max_epochs: int | None) -> None:
    """With fault tolerance, the run ends at ``max_steps``, which the groups count together; an epoch
    limit would end each group at its own epoch count (a group started again begins its epoch anew)."""
    if fault_tolerance is None:
        return
    if max_steps == -1 or max_epochs is not None:
        raise ValueError(
            f"fault_tolerance: set max_steps (the replica groups count steps together; a group started again "
            f"takes the count from a live peer) and leave max_epochs out (each group counts its own epochs); "
            f"got max_steps={max_steps}, max_epochs={max_epochs}"
        )
