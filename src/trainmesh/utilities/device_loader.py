"""A data loader whose batches come out already on the strategy's device."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from trainmesh.utilities.dataloaders import skip_batches


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

    def _moved(self, iterator: Iterator[Any]) -> Iterator[Any]:
        to_device = self._to_device
        for batch in iterator:
            yield to_device(batch)

    def skipping(self, batches: int) -> DeviceDataLoader:
        """The same loader starting ``batches`` into its next epoch (a mid-epoch resume)."""
        return DeviceDataLoader(skip_batches(self.loader, batches), self._to_device, self._moves)

    def set_epoch(self, epoch: int) -> None:
        """Tell a distributed or epoch-aware sampler which epoch starts (it seeds the shuffle)."""
        for holder in (
            getattr(self.loader, "sampler", None),
            getattr(getattr(self.loader, "batch_sampler", None), "sampler", None),
        ):
            if holder is not None and hasattr(holder, "set_epoch"):
                holder.set_epoch(epoch)
                return

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
