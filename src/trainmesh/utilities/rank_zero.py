"""Run or print something on global rank 0 only.

The rank is the process group's once it is up; before, it is read from the environment variables
that every launcher trainmesh supports sets (torchrun's ``RANK``, which the elastic agent and the
ddp_spawn/ddp_fork launcher also set for their workers; SLURM's ``SLURM_PROCID``), because a
decorator at import time has no runtime object to ask.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from trainmesh.utilities.lightning_loggers import lightning_named_logger

F = TypeVar("F", bound=Callable[..., Any])


def global_rank_from_env() -> int:
    # Once the process group is up its rank is the process's place, as Lightning's strategies then set
    # rank_zero_only.rank: processes the user started with LOCAL_RANK/NODE_RANK and no RANK (LOCAL_RANK 0
    # on every node) would otherwise each take themselves for rank 0 and each write the loggers' files.
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        value = os.environ.get(name)
        if value is not None and value.isdigit():
            return int(value)
    return 0


class _RankZeroOnly:
    """Decorate ``fn`` so that it runs on global rank 0 and returns ``default`` elsewhere.

    ``rank_zero_only.rank`` is the process's global rank, as on Lightning's (and
    lightning_utilities') decorator, which programs read to prefix their log lines (the
    lightning-hydra-template's ``RankedLogger``); it is read from the environment each time unless
    a program sets it.

    Args:
        fn: the function to run on global rank 0 only.
        default: what the other ranks get (default ``None``), as Lightning's.

    Examples:
        >>> @rank_zero_only
        ... def report(msg):
        ...     return msg
        >>> report("hi")
        'hi'
        >>> rank_zero_only.rank
        0
    """

    def __init__(self) -> None:
        self._rank: int | None = None

    @property
    def rank(self) -> int:
        return global_rank_from_env() if self._rank is None else self._rank

    @rank.setter
    def rank(self, value: int | None) -> None:
        # Lightning's strategies assign it; a program may too (None: read the environment again)
        self._rank = value

    def __call__(self, fn: F, default: Any = None) -> F:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if self.rank == 0:
                return fn(*args, **kwargs)
            return default

        return wrapped  # type: ignore[return-value]


rank_zero_only = _RankZeroOnly()


@rank_zero_only
def rank_zero_warn(message: str, stacklevel: int = 2, category: type[Warning] = UserWarning) -> None:
    """``message`` as a warning on global rank 0 (Lightning's order: ``stacklevel`` second)."""
    warnings.warn(message, category, stacklevel=stacklevel + 1)


@rank_zero_only
def rank_zero_deprecation(message: str, stacklevel: int = 2) -> None:
    """A deprecated feature the user's code uses, as a FutureWarning: Python shows it by default
    (it hides a DeprecationWarning raised inside a library), once per message."""
    warnings.warn(message, FutureWarning, stacklevel=stacklevel + 1)


# Lightning's rank_zero_info / rank_zero_debug log here (its ``lightning.pytorch.utilities.rank_zero``):
# INFO shows on stderr through the ``trainmesh`` logger's handler, or root's where the program
# configured logging, and a program's settings of Lightning's loggers govern it (lightning_loggers.py).
log = lightning_named_logger(__name__)


@rank_zero_only
def rank_zero_info(message: str, *args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    """``message`` logged at INFO on global rank 0, as Lightning's (``stacklevel`` counts as in
    Lightning, whose call goes one frame deeper)."""
    log.info(message, *args, stacklevel=stacklevel - 1, **kwargs)


@rank_zero_only
def rank_zero_debug(message: str, *args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    """``message`` logged at DEBUG on global rank 0."""
    log.debug(message, *args, stacklevel=stacklevel - 1, **kwargs)


class LightningDeprecationWarning(DeprecationWarning):
    """The category of Lightning's deprecation warnings, for programs that filter on it."""


def rank_prefixed_message(message: str, rank: int | None) -> str:
    """``message`` prefixed with ``[rank: N] `` when a rank is given."""
    return f"[rank: {rank}] {message}" if rank is not None else message


class WarningCache(set[str]):
    """Warn (or print) each message once, on rank 0, however often the code path runs."""

    def warn(self, message: str, stacklevel: int = 5, **kwargs: Any) -> None:
        if message not in self:
            self.add(message)
            rank_zero_warn(message, stacklevel=stacklevel, **kwargs)

    def deprecation(self, message: str, stacklevel: int = 6) -> None:
        if message not in self:
            self.add(message)
            rank_zero_deprecation(message, stacklevel=stacklevel)

    def info(self, message: str) -> None:
        if message not in self:
            self.add(message)
            rank_zero_info(message)
