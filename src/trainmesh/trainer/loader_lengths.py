"""What Lightning 2.6 says of each loader's length as a loop sets its loaders up (its
``has_len_all_ranks``, called once per loader by ``setup_data``): empty on every rank warns, empty on
this rank only raises (or warns where the module or data module allows it), and an
``IterableDataset`` with a ``__len__`` warns that workers may read it twice. The training loader is
checked again as Lightning's ``CombinedLoader`` (its name in the words)."""

from __future__ import annotations

from typing import Any

import torch

from trainmesh.utilities.data import has_len_all_ranks, sized_len

# Lightning's switch, on the LightningModule and the LightningDataModule (False by default)
_ALLOW_ZERO = "allow_zero_length_dataloader_with_multiple_devices"


class _NamedCombinedLoader:
    """The training loader as Lightning's length check sees it: a ``CombinedLoader`` of its length."""

    def __init__(self, length: int) -> None:
        self._length = length

    def __len__(self) -> int:
        return self._length


_NamedCombinedLoader.__name__ = "CombinedLoader"  # the name Lightning's warning gives it


def check_loader_lengths(loaders: list[Any], *, train: bool, strategy: Any, owners: tuple[Any, ...]) -> None:
    """Lightning's length checks of ``loaders`` (each loader of a CombinedLoader too), in its words;
    ``strategy`` sums the lengths across the ranks (every rank sets its loaders up here),
    ``owners`` (the module, the data module) may allow an empty loader on one rank."""
    allow_zero = any(bool(getattr(owner, _ALLOW_ZERO, False)) for owner in owners if owner is not None)
    for loader in loaders:
        for each in getattr(loader, "flattened", [loader]):
            has_len_all_ranks(each, strategy, allow_zero)
        if train:
            # Lightning always reads training through a CombinedLoader and checks it too
            length = _combined_length(loader)
            if length is not None:
                has_len_all_ranks(_NamedCombinedLoader(length), strategy, allow_zero)


def _combined_length(loader: Any) -> int | None:
    """The training loader's length as a CombinedLoader of it reads it (its own ``__len__`` answers
    only once iterated): the shortest loader's for ``min_size``, else the longest's; None where a
    loader has no length."""
    inner = getattr(loader, "flattened", None)
    if inner is None:
        return sized_len(loader)
    lengths = [sized_len(each) for each in inner]
    if not lengths or any(length is None for length in lengths):
        return None
    known = [length for length in lengths if length is not None]
    return min(known) if getattr(loader, "mode", None) == "min_size" else max(known)


class RuntimeSum:
    """Sums a loader's length across the data-parallel ranks through the Runtime, called as
    ``has_len_all_ranks`` calls a strategy's ``reduce`` (the Trainer side talks only to the Runtime)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def reduce(self, tensor: Any, reduce_op: Any = "sum") -> Any:
        # a number: the Runtime moves it to the run's device (NCCL reduces device tensors only)
        return torch.tensor(self.runtime.all_reduce(float(tensor), "sum"))
