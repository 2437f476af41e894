"""Draws in a step that trainmesh cannot map to one process's rows: refused before training.

draws.py, torch_draws.py and tensor_draws.py give each process its rows of what one process draws at the
global batch, for Keras' random functions, torch's functions called as ``torch.randn(...)`` and a tensor's
draw methods (``x.normal_()``). A draw reaching torch's global generator otherwise (a function the program
imported by name before ``fit``, ``from torch import randn``), or numpy's or Python's global generator
(``np.random.normal(size=x.shape)``), cannot be seen: each process drew the first rows of one process's
draw for its samples, and the run differed from one process's, silently (a step noising its inputs with an
imported ``randn``: weights 1.1e-2 apart at 2 processes of 16 from Keras' own fit at 32).

The step probe (step_probe.py) sees them: its runs on the halves of a batch replay every mapped draw
without touching the global generators, so a generator a half moves was moved by a draw it cannot map.
Where the half and the whole batch (replayed alike) leave that generator in different states, the draw's
size follows the batch: the step is refused on every process before any training step, naming the
generator. A draw that does not follow the batch (a scalar coin) is the same on every process, as in one.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

NAMES = ("torch's", "numpy's", "Python's")


class UnmappedDraws(Exception):
    """The step draws a batch-sized sample from a global generator no mapping sees (its reason)."""


def generator_states() -> tuple[Any, ...]:
    """torch's, numpy's and Python's global generators' states, comparable with ``moved``."""
    return torch.get_rng_state(), np.random.get_state(), random.getstate()


def _same(a: Any, b: Any, which: int) -> bool:
    if which == 0:
        return bool(torch.equal(a, b))
    if which == 1:
        return bool(a[2] == b[2] and np.array_equal(a[1], b[1]))  # the position, then the key
    return bool(a == b)


def moved(before: tuple[Any, ...], after: tuple[Any, ...]) -> list[int]:
    """Which generators (indices into ``NAMES``) differ between the two states."""
    return [which for which in range(len(NAMES)) if not _same(before[which], after[which], which)]


def reason(which: list[int], world: int) -> str:
    names = " and ".join(f"{NAMES[w]} global random generator" for w in which)
    return (
        f"the model's step draws from {names} a sample whose size follows the batch's, in a way trainmesh does "
        "not see (a torch function imported by name before fit, `from torch import randn`; numpy.random; "
        f"Python's random): under {world} processes each would draw the first rows of what one process draws "
        "at the global batch for its own samples, and the run would differ from one process's, silently. "
        "Call torch's functions through the module (torch.randn(...), torch.randn_like(x)), a tensor's own "
        "draw (x.normal_()) or keras.random with a SeedGenerator, which trainmesh gives each process its rows "
        "of; or draw outside the step and pass the draws with the data; or run on one process"
    )
