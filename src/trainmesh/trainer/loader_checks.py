"""What Lightning warns of as it sets each loader up (its ``_process_dataloader`` and
``_worker_check``): an evaluation loader that shuffles; a loader reading in this process (or with
one worker) where the machine has CPUs for more, and one whose workers start by ``spawn`` afresh
each epoch; persistent workers pinning memory where the loaders are made again every few epochs.
Said once per loader, as the loaders are set up (evaluation.py)."""

from __future__ import annotations

import multiprocessing
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, RandomSampler

from trainmesh.utilities.rank_zero import rank_zero_warn
from trainmesh.utilities.warnings import PossibleUserWarning
from trainmesh.utilities.workers import suggested_max_num_workers

# Lightning's names for the loaders of each kind ("The 'val_dataloader' does not have many workers")
_NAMES = {"train": "train_dataloader", "validate": "val_dataloader", "test": "test_dataloader"}


def warn_of_loader_settings(loaders: list[Any], kind: str, num_devices: int, *, reload_every_n_epochs: int = 0) -> None:
    """Lightning's warnings for ``loaders`` (each of a CombinedLoader's too), in its words and order;
    ``reload_every_n_epochs``: the Trainer's ``reload_dataloaders_every_n_epochs``."""
    name = _NAMES.get(kind, f"{kind}_dataloader")
    upper_bound = suggested_max_num_workers(max(1, num_devices))
    for loader in loaders:
        for each in getattr(loader, "flattened", [loader]):
            if kind != "train" and _is_shuffled(each):
                rank_zero_warn(
                    f"Your `{name}`'s sampler has shuffling enabled, it is strongly recommended that you turn "
                    "shuffling off for val/test dataloaders.",
                    category=PossibleUserWarning,
                )
            if isinstance(each, DataLoader):
                _warn_of_workers(each, name, upper_bound, reload_every_n_epochs)


def _warn_of_workers(loader: DataLoader[Any], name: str, upper_bound: int, reload_every_n_epochs: int) -> None:
    context = loader.multiprocessing_context
    start_method = context.get_start_method() if context is not None else multiprocessing.get_start_method()
    if loader.num_workers > 0 and start_method == "spawn" and not loader.persistent_workers:
        rank_zero_warn(
            f"Consider setting `persistent_workers=True` in '{name}' to speed up the dataloader worker initialization."
        )
    elif loader.num_workers < 2 and upper_bound > 1:
        rank_zero_warn(
            f"The '{name}' does not have many workers which may be a bottleneck. Consider increasing the "
            f"value of the `num_workers` argument` to `num_workers={upper_bound}` in the `DataLoader` to "
            "improve performance.",
            category=PossibleUserWarning,
        )
    if loader.persistent_workers and loader.pin_memory and reload_every_n_epochs > 0:
        rank_zero_warn(
            "The combination of `DataLoader(`pin_memory=True`, `persistent_workers=True`) and `Trainer("
            "reload_dataloaders_every_n_epochs > 0)` can lead to instability due to limitations in PyTorch"
            " (https://github.com/pytorch/pytorch/issues/91252). We recommend setting `pin_memory=False` in this case.",
            category=PossibleUserWarning,
        )


def _is_shuffled(loader: Any) -> bool:
    """Lightning's ``_is_dataloader_shuffled``: the sampler that orders the batches (a batch
    sampler's own ``sampler`` where it has one) is a ``RandomSampler``; never for an iterable dataset."""
    if isinstance(getattr(loader, "dataset", None), IterableDataset) or not hasattr(loader, "batch_sampler"):
        return False
    batches = loader.batch_sampler
    sampler = getattr(batches, "sampler", batches) if batches is not None else getattr(loader, "sampler", None)
    return isinstance(sampler, RandomSampler)
