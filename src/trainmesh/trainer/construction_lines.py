"""The Trainer's construction lines once per run, as Lightning's rank 0 says them.

``Trainer()`` says its lines ("Using bfloat16 Automatic Mixed Precision (AMP)", "GPU available: ...",
its precision warnings, trainmesh's own warning for more CPU processes than physical cores) with
``rank_zero_warn`` / ``rank_zero_info``. Under Lightning's ddp the process the user started is rank 0
and says them once. Under trainmesh's agent that process only waits after running the script up to
``fit()``, having said them; its rank-0 worker then runs the same construction again, before its process
group forms, and says nothing of it (``launchers.agent_link.said_by_the_agent_process``, the rule of
Fabric's constructor lines and of "Seed set to N"). Its errors are raised as everywhere.
"""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable
from typing import Any

from trainmesh.launchers.agent_link import said_by_the_agent_process


def said_once_per_run(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` (the Trainer's constructor) silent where the agent process said its lines already."""

    @functools.wraps(init)
    def silent_where_said(self: Any, *args: Any, **kwargs: Any) -> None:
        if not said_by_the_agent_process():
            init(self, *args, **kwargs)
            return
        # its warnings and INFO lines (all of them the agent process's, said running these same lines)
        was_disabled = logging.root.manager.disable
        logging.disable(max(was_disabled, logging.INFO))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                init(self, *args, **kwargs)
        finally:
            logging.disable(was_disabled)

    return silent_where_said
