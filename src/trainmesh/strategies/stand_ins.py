"""Whole stand-ins of sharded tensors that hold memory only while an initialiser uses them.

The model's ``init_weights()`` may touch any of its tensors, in any order, so before it runs
each sharded tensor is replaced by a whole stand-in. Allocating them all at once would hold the
whole (stage) model on every rank. Instead each stand-in starts with no storage (full shape,
zero bytes) and:

- is allocated when an operation first uses it (a ``TorchDispatchMode`` sees every aten op and
  the tensors it reads or writes, views included: a view shares its base's storage);
- is *evicted* to its shard when the live stand-ins exceed a budget (the largest one's size;
  those the current operation uses stay): the rank keeps its shard of the whole value (a local
  slice, exact) and frees the storage;
- is *restored* if an operation uses it again: its whole value is gathered from the shards
  (``full_tensor()``, exact, the same bits), or, when the operation overwrites it whole without
  reading it (``normal_``, ``uniform_``, ``fill_``, ``zero_``, ``copy_`` ... on the whole
  tensor), left with no value, since none is read.

So every operation sees exactly the values it would see with every stand-in whole at once, and
the RNG is drawn by the same operations in the same order: the result is bit-equal, and the
memory is one largest stand-in, or the stand-ins one operation uses if more (plus what the
operation itself allocates). A gather is a collective of the shard's group; every rank of the group runs the same initialiser on the same
whole values, so they gather in the same order (an initialiser that reads tensors on some ranks
only, in a branch on the rank, would make the others wait: none should, since every rank of a
group must draw the same whole values). An initialiser that uses each tensor in one stretch,
torchtitan's and torch's own, gathers nothing. Reads that bypass the dispatcher (``numpy()``,
``tolist()``, ``untyped_storage()``, ``data_ptr()``, ``deepcopy``) are seen by a
``TorchFunctionMode``: they restore the stand-in and pin it (never evicted again), as their
result may keep pointing into its memory.

A *throwaway* stands in for a tensor of another pipeline stage (on meta here): drawn into, never
kept, so its value is lost on eviction; an operation that reads it again raises ``CannotReplay``
(materialize.py then lets each stage draw for its own layers only).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten

# In-place ops that set every element of their first argument without reading it.
_OVERWRITES = {
    aten.normal_,
    aten.uniform_,
    aten.fill_,
    aten.zero_,
    aten.copy_,
    aten.bernoulli_,
    aten.exponential_,
    aten.geometric_,
    aten.log_normal_,
    aten.cauchy_,
    aten.random_,
}
# Tensor methods that read or expose memory without an aten op the dispatcher would show.
_RAW_ACCESS = {
    "numpy",
    "tolist",
    "__array__",
    "__deepcopy__",
    "__reduce_ex__",
    "__dlpack__",
    "untyped_storage",
    "storage",
    "_typed_storage",
    "data_ptr",
}


class CannotReplay(RuntimeError):
    """An initialiser read a throwaway tensor (another pipeline stage's) after it was evicted."""


class _StandIn:
    """One sharded tensor's whole stand-in (one per tensor, shared by tied names)."""

    def __init__(self, live: Any, tensor: torch.Tensor, holds_value: bool, throwaway: bool) -> None:
        self.live = live  # the DTensor (a Parameter around one) the rank keeps, or a meta tensor
        self.throwaway = throwaway  # another pipeline stage's (live on meta): drawn, never kept
        self.tensor = tensor  # the whole stand-in registered in its place during the run
        self.nbytes = tensor.numel() * tensor.element_size()
        self.storage = tensor.untyped_storage()
        self.allocated = False
        self.holds_value = holds_value  # its shard holds a value to gather when it is used again
        self.dirty = False  # written since it was allocated: its shard must be kept on eviction
        self.written = False  # written at all during the run
        self.pinned = False


def empty_stand_in(shape: torch.Size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A whole-shaped tensor without storage (zero bytes) until ``StandIns`` allocates it."""
    tensor = torch.empty(shape, dtype=dtype, device=device)
    tensor.untyped_storage().resize_(0)  # one tensor at a time, freed at once
    return tensor


class StandIns:
    """The stand-ins of one run of initialisers; ``keep_shard(live, whole)`` writes a rank's shard."""

    def __init__(self, keep_shard: Callable[[Any, torch.Tensor], None]) -> None:
        self._keep_shard = keep_shard
        self._by_storage: dict[int, _StandIn] = {}
        self._live: OrderedDict[int, _StandIn] = OrderedDict()  # allocated, least recently used first
        self._budget = 0
        self.live_bytes = 0
        self.busy = False  # the dispatch mode's own bookkeeping: not the initialiser's raw access

    def add(self, live: Any, tensor: torch.Tensor, holds_value: bool, throwaway: bool = False) -> None:
        stand_in = _StandIn(live, tensor, holds_value, throwaway)
        self._by_storage[stand_in.storage._cdata] = stand_in
        self._budget = max(self._budget, stand_in.nbytes)

    @contextmanager
    def in_use(self) -> Iterator[None]:
        """Allocate, evict and restore stand-ins as the operations inside use them."""
        with _RawAccess(self), _Uses(self):
            yield

    def finish(self) -> dict[int, bool]:
        """Keep the shard of every stand-in still allocated; ``{id(live): written}``."""
        for stand_in in list(self._live.values()):
            if stand_in.dirty and not stand_in.throwaway:
                self._keep_shard(stand_in.live, stand_in.tensor)
        return {id(stand_in.live): stand_in.written for stand_in in self._by_storage.values()}

    def used_by(self, values: Any) -> list[_StandIn]:
        found: dict[int, _StandIn] = {}
        for value in tree_flatten(values)[0]:
            if isinstance(value, torch.Tensor) and not value.is_meta:
                try:
                    key = value.untyped_storage()._cdata
                except (RuntimeError, NotImplementedError):  # a wrapper subclass (a DTensor) has none
                    continue
                if key in self._by_storage:
                    found[key] = self._by_storage[key]
        return list(found.values())

    def make_ready(self, stand_ins: list[_StandIn], overwritten: _StandIn | None) -> None:
        for stand_in in stand_ins:
            if stand_in.allocated:
                self._live.move_to_end(stand_in.storage._cdata)
                continue
            if stand_in.holds_value and stand_in.throwaway and stand_in is not overwritten:
                raise CannotReplay(
                    f"a tensor of shape {tuple(stand_in.tensor.shape)} was read again after it was evicted"
                )
            self._make_room(stand_in.nbytes, keep=stand_ins)
            stand_in.storage.resize_(stand_in.nbytes)
            stand_in.allocated = True
            self._live[stand_in.storage._cdata] = stand_in
            self.live_bytes += stand_in.nbytes
            if stand_in.holds_value and stand_in is not overwritten:
                stand_in.tensor.detach().copy_(stand_in.live.full_tensor())  # exact: the shards' bits

    def _make_room(self, nbytes: int, keep: list[_StandIn]) -> None:
        for stand_in in list(self._live.values()):
            if self.live_bytes + nbytes <= self._budget:
                return
            if stand_in.pinned or any(stand_in is kept for kept in keep):
                continue
            if stand_in.dirty:  # a throwaway's value is lost: CannotReplay if it is read again
                if not stand_in.throwaway:
                    self._keep_shard(stand_in.live, stand_in.tensor)
                stand_in.holds_value, stand_in.dirty = True, False
            stand_in.storage.resize_(0)
            stand_in.allocated = False
            del self._live[stand_in.storage._cdata]
            self.live_bytes -= stand_in.nbytes


def _written(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The arguments an aten op writes into (its schema's ``a!``: in-place self, ``out=``)."""
    values = []
    for index, argument in enumerate(func._schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            values.append(args[index] if index < len(args) else kwargs.get(argument.name))
    return values


def _overwritten(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], owner: StandIns) -> _StandIn | None:
    """The stand-in an op overwrites whole without reading it (its first argument is all of it)."""
    if func.overloadpacket not in _OVERWRITES or not args or not isinstance(args[0], torch.Tensor):
        return None
    target = owner.used_by(args[0])
    if len(target) != 1:
        return None
    whole, first = target[0].tensor, args[0]
    covers = (
        first.shape == whole.shape
        and first.stride() == whole.stride()
        and first.storage_offset() == 0
        and first.dtype == whole.dtype
    )
    reads_it_too = target[0] in owner.used_by((args[1:], kwargs))
    return target[0] if covers and not reads_it_too else None


class _Uses(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    def __init__(self, owner: StandIns) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.owner = owner

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        owner = self.owner
        owner.busy = True
        try:
            used = owner.used_by((args, kwargs))
            if used:
                owner.make_ready(used, _overwritten(func, args, kwargs, owner))
        finally:
            owner.busy = False
        result = func(*args, **kwargs)
        if used:
            owner.busy = True
            try:
                for stand_in in owner.used_by(_written(func, args, kwargs)):
                    stand_in.dirty = stand_in.written = True
            finally:
                owner.busy = False
        return result


class _RawAccess(TorchFunctionMode):
    def __init__(self, owner: StandIns) -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not self.owner.busy and getattr(func, "__name__", None) in _RAW_ACCESS:
            used = self.owner.used_by((args, kwargs))
            self.owner.make_ready(used, None)
            for stand_in in used:  # its memory may be read or written later through the result
                stand_in.pinned = stand_in.dirty = stand_in.written = True
        return func(*args, **kwargs)
