"""The checkpoints this process wrote itself.

A restart (an elastic agent's, a SLURM requeue, the run after a preemption) resumes what the earlier
attempt left, never a checkpoint this process wrote: that is another fit of the same script (a sweep's
earlier model, trained to its end), and resuming it would hand the next model the previous one's
weights and step, so that it trains nothing (measured: a restarted process's second ``Trainer.fit``
resumed the first's ``epoch=1-step=8.ckpt`` and ended with its weights; Lightning starts it afresh).
"""

from __future__ import annotations

import os

_WRITTEN: set[str] = set()  # absolute paths, every process its own


def remember(path: str | os.PathLike[str]) -> None:
    """``path`` was saved by this process (every rank calls it with the same path)."""
    _WRITTEN.add(os.path.abspath(str(path)))


def written_here() -> frozenset[str]:
    """Every checkpoint path this process saved to."""
    return frozenset(_WRITTEN)
