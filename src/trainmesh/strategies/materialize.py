"""Give a model built on the meta device real, initialised tensors, after it was sharded.

A layer built eagerly draws its initial weights in its constructor: children first, then the
layer's own initialiser (``nn.MultiheadAttention`` makes ``out_proj`` and then runs
``_reset_parameters``). Replaying the initialisers in that order (post-order) with the same
RNG state gives the same weights as an eager build, so a meta-built model under fsdp starts
where the same model under ddp starts. Each initialiser runs on whole (full-size) tensors of
its own module only, and each rank keeps its shard of the result: one module at a time is
ever whole, never the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


def materialize(module: nn.Module, device: torch.device) -> None:
    """Allocate ``module``'s meta tensors on ``device`` and initialise them as an eager build would.

    Raises ``ValueError`` naming every parameter or buffer that no initialiser wrote: left
    alone, it would hold whatever the allocator found in memory.
    """
    module.to_empty(device=device)
    slots = {id(slot.tensor): slot for slot in _slots(module)}
    written: set[int] = set()
    with torch.no_grad():
        for submodule in _post_order(module):
            initialise = own_initialiser(submodule)
            if initialise is not None:
                _run_on_full_tensors(submodule, initialise, written)
    missed = [slot.name for key, slot in slots.items() if key not in written]
    if missed:
        shown = ", ".join(missed[:8]) + (f" and {len(missed) - 8} more" if len(missed) > 8 else "")
        raise ValueError(
            f"configure_model built {shown} on the meta device, but no reset_parameters() of the "
            "module that holds them (or of a module above it) initialises them, so they would start "
            "with arbitrary memory contents. Give that module a reset_parameters() that fills them "
            "(as torch's own layers have), or create them in __init__ instead of configure_model"
        )


def own_initialiser(module: nn.Module) -> Callable[[], Any] | None:
    """The method that initialises a module's tensors: ``reset_parameters``, or the private
    ``_reset_parameters`` of layers that have only that (``nn.MultiheadAttention``)."""
    for name in ("reset_parameters", "_reset_parameters"):
        method = getattr(module, name, None)
        if callable(method):
            return method
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


def _post_order(module: nn.Module) -> Iterator[nn.Module]:
    for child in module.children():
        yield from _post_order(child)
    yield module


def _run_on_full_tensors(submodule: nn.Module, initialise: Callable[[], Any], written: set[int]) -> None:
    """Run ``initialise`` with every sharded tensor of ``submodule`` swapped for a whole one,
    then keep this rank's shard of each tensor it wrote."""
    swapped: list[tuple[_Slot, torch.Tensor, int]] = []
    for slot in _slots(submodule):
        live = slot.tensor
        if _is_dtensor(live):
            # Whole values are needed only where an earlier initialiser already wrote them (a
            # parent that sets part of a child's tensors, as MultiheadAttention zeroes out_proj.bias).
            whole = live.full_tensor() if id(live) in written else torch.empty(live.shape, dtype=live.dtype,
                                                                                 device=live.to_local().device)
            stand_in = nn.Parameter(whole, requires_grad=live.requires_grad) if slot.kind == "_parameters" else whole
            getattr(slot.owner, slot.kind)[slot.key] = stand_in
            swapped.append((slot, stand_in, stand_in._version))
        else:
            swapped.append((slot, live, live._version))
    try:
        initialise()
    finally:
        for slot, stand_in, version in swapped:
            live = slot.tensor
            if stand_in is not live:
                if stand_in._version != version:
                    _keep_local_shard(live, stand_in)
                getattr(slot.owner, slot.kind)[slot.key] = live
            if stand_in._version != version:
                written.add(id(live))


def _keep_local_shard(sharded: Any, whole: torch.Tensor) -> None:
    from torch.distributed.tensor import distribute_tensor

    # Every rank holds the same whole tensor (same seed, same initialiser): cut this rank's
    # piece locally, with no communication.
    piece = distribute_tensor(whole.detach(), sharded.device_mesh, sharded.placements, src_data_rank=None)
    sharded.to_local().copy_(piece.to_local())


def _is_dtensor(value: Any) -> bool:
    return type(value).__name__ == "DTensor" or type(getattr(value, "data", None)).__name__ == "DTensor"
