"""Keras' printed lines on rank 0 only, as one process prints them once.

Keras' callbacks (EarlyStopping, ReduceLROnPlateau, LearningRateScheduler, TerminateOnNaN, ...) run on
every rank so that they decide alike (callbacks.py), and those given ``verbose=1`` print through
``keras.src.utils.io_utils.print_msg``, which writes to stdout while Keras' interactive logging is on:
each line would appear once per process. On ranks > 0 the run turns interactive logging off with
Keras' own switch (``keras.config.disable_interactive_logging``: Keras then sends the lines to
``absl.logging``, as in a non-interactive job) and restores the caller's setting after. The user's
callbacks keep their ``verbose``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from trainmesh.keras.backend import require_keras


@contextmanager
def printing_on_rank_0(rank: int) -> Iterator[None]:
    """Within the block, Keras prints to stdout on rank 0 only (ranks > 0 log to absl instead)."""
    if rank == 0:
        yield
        return
    config = require_keras().config
    interactive = config.is_interactive_logging_enabled()
    config.disable_interactive_logging()
    try:
        yield
    finally:
        if interactive:
            config.enable_interactive_logging()
