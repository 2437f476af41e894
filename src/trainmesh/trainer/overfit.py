"""``Trainer(overfit_batches=...)``, as Lightning 2.6 defines it: fit trains and validates on the
same first batches every epoch (a count, or a fraction of each loader): ``limit_train_batches`` and
``limit_val_batches`` become ``overfit_batches``, and a loader that shuffles is read in order instead
(with Lightning's warning), in fit only.

>>> overfit_limits(2, None, 0.5)
(2, 2)
"""

from __future__ import annotations

import copy
from typing import Any

from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from trainmesh.trainer.data_source import DataSource
from trainmesh.trainer.settings import InvalidSetting
from trainmesh.utilities.dataloaders import replace_batch_sampler
from trainmesh.utilities.lazy import is_instance
from trainmesh.utilities.rank_zero import rank_zero_warn

_PREFIX = {"train": "train", "validate": "val"}
_COMBINED = "trainmesh.utilities.combined_loader"  # imported by a run that combines loaders


def overfit_limits(
    overfit_batches: int | float, limit_train: int | float | None, limit_val: int | float | None
) -> tuple[int | float | None, int | float | None]:
    """The train and validation limits: ``overfit_batches`` for both where it is set (above 0).

    A whole float above 1 (``3.0``) is Lightning 2.6's quirk: its ``trainer.overfit_batches`` reads 3,
    but the limits keep the float, a fraction of 3 times each loader, so fit trains and validates on
    every batch (measured: 5 of 5 batches an epoch); the limits here are then 1.0, every batch."""
    if isinstance(overfit_batches, bool) or not isinstance(overfit_batches, (int, float)):
        raise InvalidSetting(
            f"overfit_batches={overfit_batches!r}: give a number of batches (int) or a fraction (float in [0, 1])"
        )
    if overfit_batches < 0:  # Lightning's message
        raise InvalidSetting(
            f"You have passed invalid value {overfit_batches} for overfit_batches, it has to be in [0.0, 1.0] or an int."
        )
    if isinstance(overfit_batches, float) and overfit_batches > 1.0:
        if overfit_batches % 1.0:
            raise InvalidSetting(  # Lightning's message
                f"You have passed invalid value {overfit_batches} for overfit_batches, it has to be in [0.0, 1.0] or an int."
            )
        return 1.0, 1.0
    if overfit_batches > 0:
        return overfit_batches, overfit_batches
    return limit_train, limit_val


class _OverfitData(DataSource):
    """The fit's loaders read in order (training's and validation's)."""

    def loaders(self, kind: str, *, required: bool) -> list[Any]:
        found = super().loaders(kind, required=required)
        if kind not in _PREFIX or all(_in_order(loader) for loader in found):
            return found
        prefix = _PREFIX[kind]
        rank_zero_warn(
            f"You requested to overfit but enabled {prefix} dataloader shuffling."
            f" We are turning off the {prefix} dataloader shuffling for you."
        )
        return [_sequential(loader) for loader in found]


def for_overfit(data: DataSource, overfit_batches: int | float) -> DataSource:
    """``data`` for a fit with ``overfit_batches``; unchanged without."""
    if not overfit_batches:
        return data
    return _OverfitData(datamodule=data.datamodule, model=data.model, given=data.given)


def _in_order(loader: Any) -> bool:
    if isinstance(loader, (dict, list, tuple)) or is_instance(loader, _COMBINED, "CombinedLoader"):
        return all(_in_order(each) for each in _inner(loader))
    return not hasattr(loader, "sampler") or isinstance(loader.sampler, SequentialSampler)


def _inner(loader: Any) -> list[Any]:
    """The loaders of a dict, list, tuple or CombinedLoader of train loaders."""
    if isinstance(loader, dict):
        return list(loader.values())
    return list(loader.flattened if is_instance(loader, _COMBINED, "CombinedLoader") else loader)


def _sequential(loader: Any) -> Any:
    """A copy of ``loader`` reading its dataset in order, in batches of the same size; of a dict,
    list, tuple or CombinedLoader of loaders, each of its loaders so (as Lightning's
    ``_resolve_overfit_batches`` does to every loader of its CombinedLoader)."""
    if isinstance(loader, dict):
        return {key: _sequential(value) for key, value in loader.items()}
    if type(loader) in (list, tuple):
        return type(loader)(_sequential(each) for each in loader)
    if is_instance(loader, _COMBINED, "CombinedLoader"):
        clone = copy.copy(loader)  # the program's keeps its own loaders
        clone.flattened = [_sequential(each) for each in loader.flattened]
        return clone
    if not isinstance(loader, DataLoader) or not hasattr(loader, "dataset"):
        return loader
    order = SequentialSampler(loader.dataset)  # type: ignore[arg-type]
    if loader.batch_sampler is None:
        clone = copy.copy(loader)
        object.__setattr__(clone, "sampler", order)
        object.__setattr__(clone, "_iterator", None)
        return clone
    batch_size = int(getattr(loader.batch_sampler, "batch_size", None) or loader.batch_size or 1)
    drop_last = getattr(loader.batch_sampler, "drop_last", loader.drop_last)
    clone = replace_batch_sampler(loader, BatchSampler(order, batch_size, drop_last))
    object.__setattr__(clone, "batch_size", batch_size)
    object.__setattr__(clone, "drop_last", drop_last)
    return clone
