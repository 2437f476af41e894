"""How many batches a stage runs, from the loader's length and a limit_*_batches setting."""

from __future__ import annotations

import math
from typing import Any

from trainmesh.utilities.dataloaders import has_len


def limited_count(loader: Any, limit: int | float) -> int | float:
    """``limit`` is a count (int) or a fraction (float); inf when the loader has no length."""
    total = len(loader) if has_len(loader) else math.inf
    if isinstance(limit, int):
        return min(limit, total)
    if total == math.inf:
        if limit not in (1.0, 0.0):
            raise ValueError("a fractional limit_*_batches needs a loader with a length; give an int count")
        return math.inf if limit == 1.0 else 0
    return int(total * limit) if limit < 1.0 else total
