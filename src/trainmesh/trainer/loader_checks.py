"""What Lightning warns of as it sets each loader up (``_worker_check``): a loader reading in this
process (or with one worker) where the machine has CPUs for more, and one whose workers start by
``spawn`` afresh each epoch. Said once per loader, as the loaders are set up (evaluation.py)."""

from __future__ import annotations

import multiprocessing
from typing import Any

from torch.utils.data import DataLoader

from trainmesh.utilities.rank_zero import rank_zero_warn
from trainmesh.utilities.warnings import PossibleUserWarning
from trainmesh.utilities.workers import suggested_max_num_workers

# Lightning's names for the loaders of each kind ("The 'val_dataloader' does not have many workers")
_NAMES = {"train": "train_dataloader", "validate": "val_dataloader", "test": "test_dataloader"}


def warn_of_few_workers(loaders: list[Any], kind: str, num_devices: int) -> None:
    """Lightning's warnings for ``loaders`` (each of a CombinedLoader's too), in its words."""
    name = _NAMES.get(kind, f"{kind}_dataloader")
    upper_bound = suggested_max_num_workers(max(1, num_devices))
    for loader in loaders:
        for each in getattr(loader, "flattened", [loader]):
            if not isinstance(each, DataLoader):
                continue
            context = each.multiprocessing_context
            start_method = context.get_start_method() if context is not None else multiprocessing.get_start_method()
            if each.num_workers > 0 and start_method == "spawn" and not each.persistent_workers:
                rank_zero_warn(
                    f"Consider setting `persistent_workers=True` in '{name}' to speed up the dataloader worker "
                    "initialization."
                )
            elif each.num_workers < 2 and upper_bound > 1:
                rank_zero_warn(
                    f"The '{name}' does not have many workers which may be a bottleneck. Consider increasing the "
                    f"value of the `num_workers` argument` to `num_workers={upper_bound}` in the `DataLoader` to "
                    "improve performance.",
                    category=PossibleUserWarning,
                )
