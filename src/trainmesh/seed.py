"""Seeding and the capture/restore of every random number generator a training run uses."""

from __future__ import annotations

import os
import random
from typing import Any

import torch


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed Python's ``random``, NumPy and torch (all devices) with one number.

    With ``workers=True`` each DataLoader worker is seeded from the base seed and its worker id
    (``PL_SEED_WORKERS``-style), so augmentations in workers are reproducible too.

    >>> seed_everything(7)
    7
    """
    if seed is None:
        seed = int(os.environ.get("TRAINMESH_GLOBAL_SEED", random.SystemRandom().randint(0, 2**31 - 1)))
    if not isinstance(seed, int) or not (0 <= seed < 2**32):
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    os.environ["TRAINMESH_GLOBAL_SEED"] = str(seed)
    os.environ["TRAINMESH_SEED_WORKERS"] = "1" if workers else "0"
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # numpy is optional for torch itself
        pass
    return seed


def capture_rng_state() -> dict[str, Any]:
    """Every global generator's state, for a checkpoint."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put every global generator back where :func:`capture_rng_state` found it."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
