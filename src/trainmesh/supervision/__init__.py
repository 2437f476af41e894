"""Supervision of a run: the stuck-rank watchdog, the stop agreement and preemption, as one
service behind the Runtime (``Runtime.supervision``, ``service.py``).

What the Trainer side may import from here are the value types below: the service itself is
reached through the Runtime (tests/test_architecture.py: the one-door rule).
"""

from trainmesh.supervision.preemption import PREEMPTION_CHECKPOINT, Preempted
from trainmesh.supervision.service import Supervision
from trainmesh.supervision.watchdog import DEFAULT_TIMEOUT as DEFAULT_WATCHDOG_TIMEOUT
from trainmesh.supervision.watchdog import StuckRankError

__all__ = ["DEFAULT_WATCHDOG_TIMEOUT", "PREEMPTION_CHECKPOINT", "Preempted", "StuckRankError", "Supervision"]
