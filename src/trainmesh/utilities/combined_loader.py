"""Lightning 2.6's ``CombinedLoader`` (its ``utilities/combined_loader.py``): iterables (a list, a
dict, any nesting of them) read together in one of four modes.

- ``min_size``: stops after the shortest iterable;
- ``max_size_cycle``: stops after the longest, restarting the shorter ones when they end;
- ``max_size``: stops after the longest, giving ``None`` for those that ended;
- ``sequential``: each iterable in turn, whole.

Iterating yields ``(batch, batch_idx, dataloader_idx)``; the batch has the iterables' structure
(in ``sequential`` mode it is one iterable's batch, ``dataloader_idx`` saying whose).

>>> combined = CombinedLoader({"a": range(3), "b": range(5)}, "max_size_cycle")
>>> [batch for batch, _, _ in combined]
[{'a': 0, 'b': 0}, {'a': 1, 'b': 1}, {'a': 2, 'b': 2}, {'a': 0, 'b': 3}, {'a': 1, 'b': 4}]

The Trainer takes one as a train loader (the batches reach ``training_step`` as the structure; a
list or dict of train loaders is read as ``CombinedLoader(loaders, "max_size_cycle")``, as
Lightning does) and as a validation, test or predict loader (``sequential``: its iterables are
the stage's loaders, each with its ``dataloader_idx``; another mode: one loader of combined batches).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from torch.utils._pytree import SUPPORTED_NODES, TreeSpec, _get_node_type, tree_unflatten, treespec_leaf

Mode = Literal["min_size", "max_size_cycle", "max_size", "sequential"]
Limits = list[int | float] | None


class _ModeIterator(Iterator[tuple[Any, int, int]]):
    """One mode's reading of the iterables: ``(batches, batch_idx, dataloader_idx)`` per step."""

    def __init__(self, iterables: list[Iterable[Any]], limits: Limits = None) -> None:
        if limits is not None and len(limits) != len(iterables):
            raise ValueError(f"Mismatch in number of limits ({len(limits)}) and number of iterables ({len(iterables)})")
        self.iterables, self.limits = iterables, limits
        self.iterators: list[Iterator[Any]] = []
        self._idx = 0

    def __iter__(self) -> _ModeIterator:
        self.iterators = [iter(iterable) for iterable in self.iterables]
        self._idx = 0
        return self

    def __next__(self) -> tuple[Any, int, int]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def _index(self) -> int:
        index, self._idx = self._idx, self._idx + 1
        return index

    def reset(self) -> None:
        self.iterators, self._idx = [], 0

    def __getstate__(self) -> dict[str, Any]:
        """As Lightning's: a started DataLoader's iterator cannot be pickled (torch raises), so a
        pickled copy (``copy.deepcopy``, a spawned process) holds None in its place."""
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        state = self.__dict__.copy()
        state["iterators"] = [None if isinstance(each, _BaseDataLoaderIter) else each for each in self.iterators]
        return state


class _MaxSizeCycle(_ModeIterator):
    def __iter__(self) -> _MaxSizeCycle:
        super().__iter__()
        self._consumed = [False] * len(self.iterables)
        return self

    def __next__(self) -> tuple[Any, int, int]:
        out: list[Any] = [None] * len(self.iterators)
        for i in range(len(self.iterators)):
            try:
                out[i] = next(self.iterators[i])
            except StopIteration:
                self._consumed[i] = True
                if all(self._consumed):
                    raise
                self.iterators[i] = iter(self.iterables[i])  # the ended one starts again
                out[i] = next(self.iterators[i])
        return out, self._index(), 0

    def __len__(self) -> int:
        return _int_len(_limited_lengths(self.iterables, self.limits, max))


class _MinSize(_ModeIterator):
    def __next__(self) -> tuple[Any, int, int]:
        out = [next(iterator) for iterator in self.iterators]
        return out, self._index(), 0

    def __len__(self) -> int:
        lengths = _lengths(self.iterables)
        return _int_len(min(lengths + (self.limits or [])))


class _MaxSize(_ModeIterator):
    def __next__(self) -> tuple[Any, int, int]:
        out: list[Any] = [None] * len(self.iterators)
        exhausted = True
        for i, iterator in enumerate(self.iterators):
            with contextlib.suppress(StopIteration):
                out[i] = next(iterator)
                exhausted = False
        if exhausted:
            raise StopIteration
        return out, self._index(), 0

    def __len__(self) -> int:
        return _int_len(_limited_lengths(self.iterables, self.limits, max))


class _Sequential(_ModeIterator):
    def __iter__(self) -> _Sequential:
        self._iterator_idx, self._idx = 0, 0
        self._load_current_iterator()
        return self

    def __next__(self) -> tuple[Any, int, int]:
        n = len(self.iterables)
        if n == 0 or self._iterator_idx >= n:
            raise StopIteration
        if self.limits is not None:  # past this iterable's limit: on to the next
            while self.limits[self._iterator_idx] <= self._idx:
                self._use_next_iterator()
                if self._iterator_idx >= n:
                    raise StopIteration
        try:
            out = next(self.iterators[0])
        except StopIteration:
            self._use_next_iterator()
            return self.__next__()
        return out, self._index(), self._iterator_idx

    def __len__(self) -> int:
        return _int_len(_limited_lengths(self.iterables, self.limits, sum))

    def reset(self) -> None:
        super().reset()
        self._iterator_idx = 0

    def _load_current_iterator(self) -> None:
        # Only the current iterable's iterator: one loader's workers at a time
        n = len(self.iterables)
        self.iterators = [iter(self.iterables[self._iterator_idx])] if self._iterator_idx < n else []

    def _use_next_iterator(self) -> None:
        self._iterator_idx += 1
        self._idx = 0
        self._load_current_iterator()


_MODES: dict[str, tuple[Any, type[_ModeIterator]]] = {
    "min_size": (min, _MinSize),
    "max_size_cycle": (max, _MaxSizeCycle),
    "max_size": (max, _MaxSize),
    "sequential": (sum, _Sequential),
}


class CombinedLoader(Iterable[Any]):
    """``iterables`` (one, or a list/tuple/dict of them, nested as you like) read in ``mode``; see
    the module's docstring."""

    def __init__(self, iterables: Any, mode: Mode = "min_size") -> None:
        if mode not in _MODES:
            raise ValueError(f"Unsupported mode {mode!r}, please select one of: {list(_MODES)}.")
        self._iterables = iterables
        self._flattened, self._spec = _tree_flatten(iterables)
        self._mode = mode
        self._iterator: _ModeIterator | None = None
        self._limits: Limits = None

    @property
    def iterables(self) -> Any:
        """The iterables as given (with ``flattened``'s replacements)."""
        return self._iterables

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def sampler(self) -> Any:
        """Each iterable's ``sampler`` (None where it has none), in the iterables' structure."""
        return tree_unflatten([getattr(x, "sampler", None) for x in self.flattened], self._spec)

    @property
    def batch_sampler(self) -> Any:
        return tree_unflatten([getattr(x, "batch_sampler", None) for x in self.flattened], self._spec)

    @property
    def flattened(self) -> list[Any]:
        """The iterables as a flat list."""
        return self._flattened

    @flattened.setter
    def flattened(self, flattened: list[Any]) -> None:
        if len(flattened) != len(self._flattened):
            raise ValueError(
                f"Mismatch in flattened length ({len(flattened)}) and existing length ({len(self._flattened)})"
            )
        self._iterables = tree_unflatten(flattened, self._spec)
        self._flattened = flattened

    @property
    def limits(self) -> Limits:
        """The most batches read from each iterable (None: no limit)."""
        return self._limits

    @limits.setter
    def limits(self, limits: int | float | list[int | float] | None) -> None:
        if isinstance(limits, (int, float)):
            limits = [limits] * len(self.flattened)
        elif isinstance(limits, list) and len(limits) != len(self.flattened):
            raise ValueError(
                f"Mismatch in number of limits ({len(limits)}) and number of iterables ({len(self.flattened)})"
            )
        self._limits = limits

    def __next__(self) -> tuple[Any, int, int]:
        assert self._iterator is not None
        out = next(self._iterator)
        if isinstance(self._iterator, _Sequential):
            return out
        batches, batch_idx, dataloader_idx = out
        return tree_unflatten(batches, self._spec), batch_idx, dataloader_idx

    def __iter__(self) -> CombinedLoader:
        iterator = _MODES[self._mode][1](self.flattened, self._limits)
        iter(iterator)
        self._iterator = iterator
        return self

    def __len__(self) -> int:
        """The number of batches (as Lightning's: only once an iteration started)."""
        if self._iterator is None:
            raise RuntimeError("Please call `iter(combined_loader)` first.")
        return len(self._iterator)

    def reset(self) -> None:
        """Drop the iteration, and each loader's iterator (shutting its workers down)."""
        if self._iterator is not None:
            self._iterator.reset()
            self._iterator = None
        for iterable in self.flattened:
            if hasattr(iterable, "_iterator"):
                shutdown = getattr(iterable._iterator, "_shutdown_workers", None)
                if shutdown is not None:
                    shutdown()
                iterable._iterator = None

    def _dataset_length(self) -> int:
        """The datasets' lengths combined by the mode (min, max or sum)."""
        lengths = [length for dl in self.flattened if (length := _sized_len(getattr(dl, "dataset", None))) is not None]
        if not lengths:
            raise NotImplementedError("All datasets are iterable-style datasets.")
        return int(_MODES[self._mode][0](lengths))


class CombinedBatches:
    """A ``CombinedLoader`` as the loops read a loader: its batches alone (``batch_idx`` is the
    loop's count), its length known without starting an iteration (starting one starts each
    loader's iterator, which draws from the random generators: that happens where a plain
    loader's would), and each loader's sampler told the epoch."""

    def __init__(self, combined: CombinedLoader) -> None:
        self.combined = combined

    def __iter__(self) -> Iterator[Any]:
        # Started now, not at the first next(): each loader's iterator draws its seed when it starts
        return _batches(iter(self.combined))

    def __len__(self) -> int:
        return _int_len(len(_MODES[self.combined.mode][1](self.combined.flattened, self.combined.limits)))

    def set_epoch(self, epoch: int) -> None:
        for loader in self.combined.flattened:
            for holder in (
                getattr(loader, "sampler", None),
                getattr(getattr(loader, "batch_sampler", None), "sampler", None),
            ):
                if holder is not None and hasattr(holder, "set_epoch"):
                    holder.set_epoch(epoch)
                    break


def _batches(combined: CombinedLoader) -> Iterator[Any]:
    while True:  # (a for loop would call iter() again: a new iteration)
        try:
            batch, _, _ = next(combined)
        except StopIteration:
            return
        yield batch


def is_one_iterable(loaders: Any) -> bool:
    """A non-empty list or tuple of numbers or strings (``[0, 1]``): Lightning's ``CombinedLoader``
    takes it as one iterable of batches, not as a list of loaders."""
    if not isinstance(loaders, (list, tuple)) or not loaders:
        return False
    flat = _tree_flatten(loaders)[0]
    return len(flat) == 1 and flat[0] is loaders


def _tree_flatten(tree: Any) -> tuple[list[Any], TreeSpec]:
    """torch's ``tree_flatten``, except that a container of numbers or strings is one leaf (as
    Lightning's ``_tree_flatten``: a list of numbers is an iterable, not several)."""
    node_type = _get_node_type(tree)
    if node_type not in SUPPORTED_NODES:
        return [tree], treespec_leaf()
    children, context = SUPPORTED_NODES[node_type].flatten_fn(tree)
    if all(isinstance(child, (int, float, str)) for child in children):
        return [tree], treespec_leaf()
    flat: list[Any] = []
    specs: list[TreeSpec] = []
    for child in children:
        child_flat, child_spec = _tree_flatten(child)
        flat += child_flat
        specs.append(child_spec)
    return flat, TreeSpec(node_type, context, specs)


def _sized_len(obj: Any) -> int | None:
    try:
        return len(obj)
    except (TypeError, NotImplementedError):
        return None


def _lengths(iterables: list[Any]) -> list[int | float]:
    return [math.inf if (length := _sized_len(it)) is None else length for it in iterables]


def _limited_lengths(iterables: list[Any], limits: Limits, combine: Any) -> int | float:
    lengths = _lengths(iterables)
    if limits is not None:
        lengths = [min(length, limit) for length, limit in zip(lengths, limits, strict=True)]
    return combine(lengths)


def _int_len(length: int | float) -> int:
    """``len()`` must be an int: an iterable without a length makes the whole one lengthless."""
    if length == math.inf:
        raise TypeError("a CombinedLoader over an iterable without a length has no length")
    return int(length)
