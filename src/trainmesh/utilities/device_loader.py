"""A data loader whose batches come out already on the strategy's device."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from trainmesh.utilities.collections import move_data_to_device
from trainmesh.utilities.dataloaders import skip_batches
from trainmesh.utilities.lazy import is_instance


class DeviceDataLoader:
    """Iterates a loader and hands out batches already on the strategy's device."""

    def __init__(self, loader: Any, to_device: Callable[[Any], Any], moves: Callable[[], bool]) -> None:
        self.loader = loader
        self._to_device = to_device
        self._moves = moves  # whether to_device changes anything (asked when an epoch starts)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        # Start the loader's iterator now, not at the first next(): samplers draw their
        # shuffle seed from the global RNG when it starts, and an exact resume depends on
        # when that draw happens.
        iterator = iter(self.loader)
        # Where batches need no move (CPU, inputs in their own dtype) they are handed out as the
        # loader makes them: a generator in between costs a resume per batch.
        return self._moved(iterator) if self._moves() else iterator

    def batches(self) -> Iterator[Any]:
        """The loader's batches as it makes them, its iterator started now; a loop that reads
        ahead (trainer/fetching.py) moves each with :meth:`batch_transfer` when it takes it."""
        return iter(self.loader)

    def batch_transfer(self) -> Callable[[Any], Any] | None:
        """What takes one of :meth:`batches` to the device; None where nothing would change."""
        return self._to_device if self._moves() else None

    def _moved(self, iterator: Iterator[Any]) -> Iterator[Any]:
        to_device = self._to_device
        for batch in iterator:
            yield to_device(batch)

    def skipping(self, batches: int) -> DeviceDataLoader:
        """The same loader starting ``batches`` into its next epoch (a mid-epoch resume)."""
        return DeviceDataLoader(skip_batches(self.loader, batches), self._to_device, self._moves)

    def set_epoch(self, epoch: int) -> None:
        """Tell a distributed or epoch-aware sampler which epoch starts (it seeds the shuffle)."""
        if is_instance(self.loader, "trainmesh.utilities.combined_loader", "CombinedBatches"):
            self.loader.set_epoch(epoch)  # each of its loaders'
            return
        # Lightning's _set_sampler_epoch: the loader's sampler and its batch sampler's sampler, each once
        # (a custom batch sampler may hold a sampler of its own beside the loader's)
        holders = {
            id(holder): holder
            for holder in (
                getattr(self.loader, "sampler", None),
                getattr(getattr(self.loader, "batch_sampler", None), "sampler", None),
            )
            if holder is not None
        }
        for holder in holders.values():
            if callable(getattr(holder, "set_epoch", None)):
                holder.set_epoch(epoch)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":  # not set yet: copy.deepcopy and pickle ask before __dict__ is filled
            raise AttributeError(name)
        return getattr(self.loader, name)


@dataclass(frozen=True)
class BatchHooks:
    """Lightning's batch-transfer hooks of a run, each the DataModule's or the Module's bound
    method, None where neither defines it (trainer/batch_transfer.py chooses)."""

    before: Callable[[Any, int], Any] | None = None  # on_before_batch_transfer(batch, dataloader_idx)
    transfer: Callable[[Any, torch.device, int], Any] | None = None  # transfer_batch_to_device(batch, device, idx)
    after: Callable[[Any, int], Any] | None = None  # on_after_batch_transfer(batch, dataloader_idx)


class HookedTransfer:
    """A batch's way to the device where a batch-transfer hook is defined, in Lightning's order:
    the precision's input conversion, ``on_before_batch_transfer``, ``transfer_batch_to_device``
    (where not defined, Lightning's default: ``move_data_to_device``, skipped where nothing would
    move), ``on_after_batch_transfer``; each hook told the loader's ``dataloader_idx``."""

    def __init__(
        self,
        hooks: BatchHooks,
        dataloader_idx: int,
        *,
        device: torch.device,
        convert_input: Callable[[Any], Any],
        moves: Callable[[], bool],
    ) -> None:
        self.hooks, self.dataloader_idx, self.device = hooks, dataloader_idx, device
        self._convert_input, self._moves = convert_input, moves

    def __call__(self, batch: Any) -> Any:
        hooks, index = self.hooks, self.dataloader_idx
        batch = self._convert_input(batch)
        if hooks.before is not None:
            batch = hooks.before(batch, index)
        if hooks.transfer is not None:
            batch = hooks.transfer(batch, self.device, index)
        elif self._moves():
            batch = move_data_to_device(batch, self.device)
        if hooks.after is not None:
            batch = hooks.after(batch, index)
        return batch


def hooked_loader(
    loader: Any,
    hooks: BatchHooks,
    dataloader_idx: int,
    device: torch.device,
    convert_input: Callable[[Any], Any],
    moves: Callable[[], bool],
) -> DeviceDataLoader:
    """``loader``'s batches taken to ``device`` through ``hooks``: every batch, on the CPU too."""
    transfer = HookedTransfer(hooks, dataloader_idx, device=device, convert_input=convert_input, moves=moves)
    return DeviceDataLoader(loader, transfer, lambda: True)
