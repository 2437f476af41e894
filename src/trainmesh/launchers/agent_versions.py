"""The log folder versions a ddp agent's loggers took before it started its workers, handed to them.

Under ``strategy="ddp"`` from ``python train.py``, trainmesh's first process runs the script up to
``fit``, then becomes the elastic agent and the workers run the whole script again
(``launchers/elastic.py``). Lightning's first process is rank 0 itself: a logger it used before
``fit`` (``trainer.logger.log_hyperparams(...)``, ``logger.experiment``) took ``version_0`` and the
run's metrics then go there too. Here rank 0's worker makes that logger again, finds ``version_0``
taken by the agent, and the run went to ``version_1`` beside a folder holding only the agent's
``hparams.yaml``. So the agent hands each folder's versions, in the order its loggers took them,
to its workers, whose loggers take those first (the script runs the same code up to ``fit``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from trainmesh.launchers.agent_link import own_agent_run_id

VERSIONS_VARIABLE = "TRAINMESH_AGENT_LOG_VERSIONS"  # {absolute root: [versions in the order taken]}
_taken: dict[str, list[int]] = {}  # this process's loggers' versions, per root folder
_handed: dict[str, list[int]] | None = None  # what the agent handed this worker; None: not read yet
_from_agent: set[tuple[str, int]] = set()  # (root, version) this worker took from the agent


def claim_version(root: str | os.PathLike, next_free: Callable[[str], int]) -> int:
    """The version a logger without one takes under ``root``: in a worker of trainmesh's agent, the
    next one the agent's loggers took there before the launch; otherwise ``next_free(root)``."""
    key = os.path.abspath(root)
    handed = _handed_versions().get(key)
    if handed:
        version = handed.pop(0)
        _from_agent.add((key, version))
    else:
        version = next_free(str(root))
    if isinstance(version, int):
        _taken.setdefault(key, []).append(version)
    return version


def taken_from_agent(root: str | os.PathLike, version: int | str) -> bool:
    """Whether this worker's ``version`` under ``root`` is one the agent handed on: its files are this
    run's (the agent's logger wrote them before fit), not an earlier run's."""
    return (os.path.abspath(root), version) in _from_agent


def hand_versions_to_workers() -> None:
    """In the process about to become the agent: let the workers it starts inherit the versions."""
    if _taken:
        os.environ[VERSIONS_VARIABLE] = json.dumps(_taken)


def _handed_versions() -> dict[str, list[int]]:
    global _handed
    if _handed is None:
        raw = os.environ.get(VERSIONS_VARIABLE) if own_agent_run_id() is not None else None
        _handed = json.loads(raw) if raw else {}
    return _handed
