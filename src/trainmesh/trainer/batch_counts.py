"""How many batches a stage runs, from the loader's length and a limit_*_batches setting."""

from __future__ import annotations

import math
from typing import Any

from trainmesh.utilities.dataloaders import has_len
from trainmesh.utilities.exceptions import MisconfigurationException, MisconfiguredValue


def limited_count(loader: Any, limit: int | float, prefix: str = "val") -> int | float:
    """``limit`` is a count (int) or a fraction (float); inf when the loader has no length.
    ``prefix`` names the loader in the error (``train``, ``val``, ``test``, ``predict``)."""
    total = len(loader) if has_len(loader) else math.inf
    if isinstance(limit, int):
        return min(limit, total)
    if total == math.inf:
        if limit not in (1.0, 0.0):
            raise MisconfiguredValue(  # Lightning's class (a ValueError too, as before) and words
                f"When using an `IterableDataset`, `Trainer(limit_{prefix}_batches)` must be `1.0` or an int. An int"
                f" specifies `num_{prefix}_batches` to use."
            )
        return math.inf if limit == 1.0 else 0
    count = int(total * limit) if limit < 1.0 else total
    if count == 0 and limit > 0.0 and total > 0:
        # A fraction that rounds down to no batch would skip the stage without a word: Lightning
        # 2.6 refuses it (data_connector._parse_num_batches), with this message.
        raise MisconfigurationException(
            f"You requested to check {limit} of the `{prefix}_dataloader` but {limit} * {total} < 1. Please"
            f" increase the `limit_{prefix}_batches` argument. Try at least `limit_{prefix}_batches={1.0 / total}`"
        )
    return count
