"""Give a model built on the meta device real, initialised tensors, after it was sharded.

A layer built eagerly draws its initial weights in its constructor: children first, then the
layer's own initialiser (``nn.MultiheadAttention`` makes ``out_proj`` and then runs
``_reset_parameters``). Replaying the initialisers in that order (post-order) with the same
RNG state gives the same weights as an eager build, so a meta-built model under fsdp starts
where the same model under ddp starts. Each initialiser runs on whole (full-size) tensors of
its own module only, and each rank keeps its shard of the result: one module at a time is
ever whole, never the model.

Then the model's own initialiser runs, if it declares one: ``init_weights()`` (torchtitan's
hook: build on meta, parallelize, ``to_empty``, ``init_weights()``), or a ``reset_parameters``
of the model itself (``reset_parameters = init_weights``). It runs last, as it does at the end
of an eager ``__init__``, after the layers' initialisers and together with them, on whole
stand-ins of the tensors, and each rank keeps its shard: so the RNG is drawn in the eager
build's order, and sharded weights equal the eager build's (DTensor's own random ops would not:
on CPU every shard would draw the same numbers). The hook may touch any tensor in any order, so
the stand-ins are lazy (stand_ins.py): each holds memory only while operations use it and goes
back to its shard when another needs the room, so the whole model is never held at once. It may
replace a buffer (``self.freqs_cis = precompute(...)``) but not a parameter, which sharding has
already replaced by its own.

A pipeline stage holds only its own layers, but the eager build drew for all of them: the parts
the cut dropped (still on meta) are put back for the initialisers (pipeline_cut.py's
``whole_model_on_meta``) and drawn into on throwaway tensors, one part at a time (or lazily,
under the model's hook), so each stage's layers equal the eager build's. A hook that reads a
throwaway again after it was evicted cannot be replayed that way: then each stage draws for its
own layers only, as before, with a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

import torch
from torch import nn

from trainmesh.utilities.dtensors import is_dtensor
from trainmesh.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor

    from trainmesh.strategies.stand_ins import StandIns


def materialize(module: nn.Module, device: torch.device) -> None:
    """Allocate ``module``'s meta tensors on ``device`` and initialise them as an eager build would.

    Raises ``ValueError`` naming every parameter or buffer that no initialiser wrote: left
    alone, it would hold whatever the allocator found in memory.
    """
    # Imported here: only a model built on the meta device is materialised (the Runtime imports
    # this module for builds_on_meta and refuse_meta_tensors on every run).
    from trainmesh.strategies.pipeline_cut import whole_model_on_meta
    from trainmesh.strategies.stand_ins import CannotReplay

    ties = _tied_slots(module)
    module.to_empty(device=device)
    for first, *others in ties:  # to_empty gives each registration its own tensor: tie them again
        for owner, kind, key in others:
            getattr(owner, kind)[key] = getattr(first[0], first[1])[first[2]]
    slots = {id(slot.tensor): slot for slot in _slots(module)}
    written: set[int] = set()
    rng = _rng_state(device)
    try:
        # A pipeline stage replays the whole model's initialisers: the other stages' layers (still
        # on meta) on throwaway tensors, so that its own layers draw what the eager build drew.
        with whole_model_on_meta(module):
            _initialise(module, device, written)
    except CannotReplay as reason:
        _set_rng_state(device, rng)
        written.clear()
        rank_zero_warn(
            f"init_weights() could not be replayed over the other pipeline stages' layers ({reason}): "
            "each stage draws for its own layers only, so the initial weights differ from an eager build's"
        )
        _initialise(module, device, written)
    missed = [slot.name for key, slot in slots.items() if key not in written]
    if missed:
        shown = ", ".join(missed[:8]) + (f" and {len(missed) - 8} more" if len(missed) > 8 else "")
        raise ValueError(
            f"configure_model built {shown} on the meta device, but no reset_parameters() of the "
            "module that holds them (or of a module above it) and no init_weights() of the model "
            "initialises them, so they would start with arbitrary memory contents. Give the model an "
            "init_weights() that fills them (torchtitan's hook; trainmesh calls it after sharding), or "
            "that module a reset_parameters() (as torch's own layers have), or create them in __init__ "
            "instead of configure_model"
        )


def _initialise(module: nn.Module, device: torch.device, written: set[int]) -> None:
    """Every layer's initialiser in the eager build's order, then the model's hook."""
    model_hook = model_initialiser(module)
    initialisers = [
        (submodule, initialise)
        for submodule in _post_order(module)
        if (initialise := own_initialiser(submodule)) is not None
        and not (submodule is module and initialise == model_hook)
    ]
    with torch.no_grad():
        if model_hook is None:
            for submodule, group in _by_part(module, initialisers):  # one module (or dropped part) whole
                _run_on_full_tensors(submodule, group, written, device=device, lazy=submodule is module)
        else:
            # The model's hook touches any tensor: every tensor this rank holds gets a lazy whole
            # stand-in, for the layers' initialisers and the hook together.
            every = [initialise for _, initialise in initialisers] + [model_hook]
            _run_on_full_tensors(module, every, written, device=device, lazy=True)


def _by_part(
    module: nn.Module, initialisers: list[tuple[nn.Module, Callable[[], Any]]]
) -> Iterator[tuple[nn.Module, list[Callable[[], Any]]]]:
    """Each module with its initialiser; but the initialisers of a part another pipeline stage
    holds (on meta) together, on that part: its tensors stay whole between them (a parent may
    read what a child's initialiser drew), then are thrown away."""
    from trainmesh.strategies.pipeline_cut import pipeline_parts

    replaying = any(t.is_meta for t in module.parameters())  # parts of other stages are back
    parts = [module.get_submodule(name) for name in (pipeline_parts(module) if replaying else [])]
    owner = {id(inner): part for part in parts if any(t.is_meta for t in part.parameters()) for inner in part.modules()}
    group: list[Callable[[], Any]] = []
    current: nn.Module | None = None
    for submodule, initialise in initialisers:
        part = owner.get(id(submodule))
        if group and (part is None or part is not current):
            yield current if current is not None else module, group
            group = []
        if part is None:
            yield submodule, [initialise]
        else:
            current = part
            group.append(initialise)
    if group and current is not None:
        yield current, group


def _rng_state(device: torch.device) -> list[torch.Tensor]:
    return [torch.get_rng_state()] + ([torch.cuda.get_rng_state(device)] if device.type == "cuda" else [])


def _set_rng_state(device: torch.device, states: list[torch.Tensor]) -> None:
    torch.set_rng_state(states[0])
    if device.type == "cuda":
        torch.cuda.set_rng_state(states[1], device)


def meta_tensor_names(module: nn.Module) -> list[str]:
    """The parameters and buffers of ``module`` that live on the meta device (no data yet)."""
    return [slot.name for slot in _slots(module) if slot.tensor.is_meta]


def refuse_meta_tensors(module: nn.Module, strategy_name: str) -> None:
    """A model handed over on the meta device to a strategy that places whole models (it would
    fail in ``.to(device)`` with torch's "Cannot copy out of meta tensor")."""
    names = meta_tensor_names(module)
    if names:
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        raise ValueError(
            f"{type(module).__name__} has tensors on the meta device ({shown}): it was built on the meta device "
            f"outside configure_model, and strategy {strategy_name!r} places whole models, with nothing to fill them "
            "from (torch would fail with 'Cannot copy out of meta tensor'). Build those layers in the Module's "
            "configure_model() instead: trainmesh runs it on the meta device where the strategy shards or splits "
            "the model (fsdp, tp, pp), materialises each rank's share and calls init_weights(), and on the real "
            "device elsewhere"
        )


def model_initialiser(module: nn.Module) -> Callable[[], Any] | None:
    """``init_weights()`` (torchtitan's name), run after every layer's initialiser. (A
    ``reset_parameters()`` of the model itself already runs last: the model is the root.)"""
    hook = getattr(module, "init_weights", None)
    return hook if callable(hook) else None


def own_initialiser(module: nn.Module) -> Callable[[], Any] | None:
    """The method that initialises a module's tensors: ``reset_parameters``, or the private
    ``_reset_parameters`` of layers that have only that (``nn.MultiheadAttention``)."""
    for name in ("reset_parameters", "_reset_parameters"):
        method = getattr(module, name, None)
        if callable(method):
            initialiser: Callable[[], Any] = method
            return initialiser
    return None


@dataclass
class _Slot:
    """One parameter or buffer: where it is registered, and its qualified name for messages."""

    owner: nn.Module
    kind: str  # "_parameters" or "_buffers"
    key: str
    name: str
    tensor: torch.Tensor


def _slots(module: nn.Module, prefix: str = "") -> Iterator[_Slot]:
    seen: set[int] = set()
    for owner_name, owner in module.named_modules(prefix=prefix):
        for kind in ("_parameters", "_buffers"):
            for key, tensor in getattr(owner, kind).items():
                if tensor is not None and id(tensor) not in seen:
                    seen.add(id(tensor))
                    yield _Slot(owner, kind, key, f"{owner_name}.{key}" if owner_name else key, tensor)


def _tied_slots(module: nn.Module) -> list[list[tuple[nn.Module, str, str]]]:
    """Registrations sharing one tensor (tied embeddings), as (owner, kind, key), grouped."""
    return [group for group, _ in _tied_groups(module)]


def _tied_groups(module: nn.Module) -> list[tuple[list[tuple[nn.Module, str, str]], torch.Tensor]]:
    places: dict[int, tuple[list[tuple[nn.Module, str, str]], torch.Tensor]] = {}
    for owner in module.modules():
        for kind in ("_parameters", "_buffers"):
            for key, tensor in getattr(owner, kind).items():
                if tensor is not None:
                    places.setdefault(id(tensor), ([], tensor))[0].append((owner, kind, key))
    return [(group, tensor) for group, tensor in places.values() if len(group) > 1]


def _post_order(module: nn.Module) -> Iterator[nn.Module]:
    for child in module.children():
        yield from _post_order(child)
    yield module


def _run_on_full_tensors(
    submodule: nn.Module,
    initialisers: list[Callable[[], Any]],
    written: set[int],
    *,
    device: torch.device,
    lazy: bool = False,
) -> None:
    """Run ``initialisers`` with every sharded tensor of ``submodule`` swapped for a whole one,
    then keep this rank's shard of each tensor they wrote. ``lazy``: the whole ones hold memory
    only while used (stand_ins.py), for initialisers that may touch any tensor of a large module."""
    from trainmesh.strategies.stand_ins import StandIns

    stand_ins = StandIns(_keep_local_shard) if lazy else None
    shared = {id(tensor): group for group, tensor in _tied_groups(submodule)}  # before the swap hides them
    swapped = _swap_in_stand_ins(submodule, written, stand_ins, shared, device)
    try:
        with stand_ins.in_use() if stand_ins is not None else nullcontext():
            for initialise in initialisers:
                initialise()
    finally:
        kept = stand_ins.finish() if stand_ins is not None else {}  # the shards of those still whole
        for slot, stand_in, version in swapped:
            registry = getattr(slot.owner, slot.kind)
            live, now = slot.tensor, registry.get(slot.key)
            if live.is_meta:  # another pipeline stage's: drawn into and thrown away
                for owner, kind, key in shared.get(id(live), [(slot.owner, slot.kind, slot.key)]):
                    getattr(owner, kind)[key] = live
                continue
            replaced = now is not stand_in
            if replaced:
                _check_replacement(slot, now)  # a buffer assigned afresh stays as assigned
            changed = replaced or (kept[id(live)] if id(live) in kept else stand_in._version != version)
            if stand_in is not live:  # a whole stand-in of a sharded tensor
                if replaced or (changed and id(live) not in kept):
                    _keep_local_shard(live, now)
                for owner, kind, key in shared.get(id(live), [(slot.owner, slot.kind, slot.key)]):
                    getattr(owner, kind)[key] = live
            if changed:
                written.add(id(live))


def _swap_in_stand_ins(
    submodule: nn.Module,
    written: set[int],
    stand_ins: StandIns | None,
    shared: dict[int, list[tuple[nn.Module, str, str]]],
    device: torch.device,
) -> list[tuple[_Slot, torch.Tensor, int]]:
    """Register a whole stand-in in place of each sharded tensor (under each of its names:
    ``shared``, the tied ones); (slot, tensor now, its version)."""
    from trainmesh.strategies.stand_ins import empty_stand_in

    swapped: list[tuple[_Slot, torch.Tensor, int]] = []
    for slot in list(_slots(submodule)):  # listed first: the loop swaps what _slots would read
        live = slot.tensor
        throwaway = live.is_meta and not _is_dtensor(live)  # another pipeline stage's
        lazy = stand_ins is not None
        if throwaway:
            whole = (empty_stand_in if lazy else torch.empty)(live.shape, dtype=live.dtype, device=device)
        elif not _is_dtensor(live):
            swapped.append((slot, live, live._version))
            continue
        elif lazy:  # no storage until an operation uses it
            whole = empty_stand_in(live.shape, dtype=live.dtype, device=live.to_local().device)
        elif id(live) in written:
            # Whole values are needed only where an earlier initialiser already wrote them (a
            # parent that sets part of a child's tensors, as MultiheadAttention zeroes out_proj.bias).
            whole = live.full_tensor()
        else:
            whole = torch.empty(live.shape, dtype=live.dtype, device=live.to_local().device)
        stand_in = nn.Parameter(whole, requires_grad=live.requires_grad) if slot.kind == "_parameters" else whole
        if stand_ins is not None:
            stand_ins.add(live, stand_in, holds_value=id(live) in written, throwaway=throwaway)
        # A tied tensor gets the stand-in under every name, so that each of its owners'
        # initialisers draws into it as in the eager build (never into the DTensor itself).
        for owner, kind, key in shared.get(id(live), [(slot.owner, slot.kind, slot.key)]):
            getattr(owner, kind)[key] = stand_in
        swapped.append((slot, stand_in, stand_in._version))
    return swapped


def _check_replacement(slot: _Slot, now: Any) -> None:
    """An initialiser assigned a new tensor to ``slot``: fine for a buffer, not for a parameter."""
    if slot.kind == "_parameters" or not isinstance(now, torch.Tensor):
        raise ValueError(
            f"the initialiser replaced {slot.name} ({'a parameter' if slot.kind == '_parameters' else 'a buffer'}) "
            f"with {type(now).__name__} instead of writing into it. Sharding (fsdp, tp) and the optimizer hold the "
            "parameter itself: fill it in place (nn.init.normal_(self.w), self.w.copy_(...)); only a buffer may be "
            "assigned afresh (self.freqs_cis = precompute(...))"
        )
    if now.is_meta:
        raise ValueError(
            f"the initialiser set the buffer {slot.name} on the meta device; build it on the device of "
            "the tensors it replaces (e.g. with torch.device(self.freqs_cis.device): ...)"
        )


def _keep_local_shard(sharded: Any, whole: torch.Tensor) -> None:
    from torch.distributed.tensor import distribute_tensor

    # Every rank holds the same whole tensor (same seed, same initialiser): cut this rank's
    # piece locally, with no communication.
    piece = distribute_tensor(whole.detach(), sharded.device_mesh, sharded.placements, src_data_rank=None)
    sharded.to_local().copy_(piece.to_local())


def _is_dtensor(value: Any) -> TypeGuard[DTensor]:  # a DTensor itself or a Parameter around one
    return is_dtensor(value) or is_dtensor(getattr(value, "data", None))


def builds_on_meta(init_context: Any) -> bool:
    """Whether a strategy whose ``module_init_context()`` is ``init_context`` (a torch.device, or a
    context that sets one, as model parallel's records parameter registrations) builds
    configure_model on the meta device (and so materialises the layers itself)."""
    with init_context:
        return torch.get_default_device().type == "meta"
