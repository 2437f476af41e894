"""Lightning's ``callbacks.progress.tqdm_progress`` path: ``TQDMProgressBar`` (trainmesh's bar under
Lightning's name), for a program that imports it from here; ``convert_inf`` as Lightning's; ``Tqdm``
(the tqdm bar Lightning's draws with) refused: trainmesh's bar does not draw with tqdm."""

from __future__ import annotations

import math
from typing import Any

from trainmesh.callbacks.progress import TQDMProgressBar
from trainmesh.utilities.refusal import refused_class

__all__ = ["TQDMProgressBar", "Tqdm", "convert_inf"]

Tqdm = refused_class(
    "Tqdm",
    "the tqdm bar Lightning's TQDMProgressBar draws with; trainmesh's TQDMProgressBar draws its own line "
    "without tqdm, so init_*_tqdm overrides have nothing to return it to: write a ProgressBar subclass of your own",
    module=__name__,
)


def convert_inf(x: Any) -> Any:
    """None for None or an infinite count (tqdm's "unknown total"), else ``x``.

    Args:
        x: a count, or None.

    Examples:
        >>> convert_inf(float("inf")), convert_inf(3)
        (None, 3)
    """
    if x is None or math.isinf(x) or math.isnan(x):
        return None
    return x
