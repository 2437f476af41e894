"""Where a pipeline cuts a model into stages. A model's *parts*, in the order its forward runs
them, are its top-level children, with top-level containers (``nn.Sequential``, ``nn.ModuleList``,
``nn.ModuleDict``) counted member by member (``"layers.3"``), and a list or dict inside one counted
member by member too (nanoGPT's ``transformer.h.2``: a forward iterates those, never calls them).
A stage is a run of consecutive parts: named by split points (``split_points=["layers.4"]`` starts
the second stage at ``layers.4``) or, by default, balanced by parameter count. A rank keeps its
stages' parts and drops the rest, torchtitan's way: a dropped top-level child becomes ``None`` and
a dropped container member is removed with its name kept, so parameter names stay those of the
whole model (one distributed checkpoint, written by every stage, loads into the whole model). The
stage's forward is the model's own ``forward``: it must skip what is ``None`` (``h = self.embed(x)
if self.embed is not None else x``) or absent (``if "wte" in self.transformer``); an
``nn.Sequential`` left empty passes its input through.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from torch import nn

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
# Containers a forward iterates or indexes but never calls: inside a top-level container, their
# members are the parts (an nn.Sequential there is called, so it stays one part).
ITERATED = (nn.ModuleList, nn.ModuleDict)


def pipeline_parts(module: nn.Module) -> list[str]:
    """The model's parts in registration order: top-level children, containers member by member."""
    own = [name for name, p in module._parameters.items() if p is not None]
    if own:
        raise ValueError(
            f"{type(module).__name__} holds parameters directly ({', '.join(own)}), which no pipeline stage can "
            "own; put them in a submodule (e.g. an nn.Embedding or a small nn.Module) so that one stage holds them"
        )
    return [part for name, child in module.named_children() for part in _parts_of(name, child, _CONTAINERS)]


def _parts_of(name: str, child: nn.Module, expanded: tuple[type[nn.Module], ...]) -> list[str]:
    if not isinstance(child, expanded):
        return [name]
    members = [(f"{name}.{key}", member) for key, member in child._modules.items() if member is not None]
    return [part for inner, member in members for part in _parts_of(inner, member, ITERATED)]


def split_parts(module: nn.Module, num_stages: int, split_points: Sequence[str] | None) -> list[list[str]]:
    """The parts of each stage: cut before each split point, or balanced by parameter count."""
    parts = pipeline_parts(module)
    owner = type(module).__name__
    if len(parts) < num_stages:
        nested = _nested_blocks(module, num_stages)
        if nested is not None:
            name, count = nested
            top = name.split(".")[0]
            raise ValueError(
                f"{owner} has {len(parts)} parts ({', '.join(parts)}) but the pipeline needs {num_stages} stages: its "
                f"blocks are nested, {name} ({count} blocks) sits inside {top!r}, and a pipeline cuts only the model's "
                f"top-level children and the members of its top-level containers. Expose the blocks: hold them (and "
                f"the layers before and after them) as attributes of {owner} itself, e.g. self.layers = "
                f"nn.ModuleDict(...) as torchtitan's models do, with a forward that skips what another stage holds "
                f"(None); or use fewer stages (pp x stages_per_rank)"
            )
        raise ValueError(
            f"{owner} has {len(parts)} parts ({', '.join(parts)}) but the pipeline needs {num_stages} stages; "
            "use fewer stages (pp x stages_per_rank), or a model with more blocks"
        )
    if isinstance(split_points, str):
        raise TypeError(
            f"split_points={split_points!r} is one string; give a list of part names, e.g. split_points=[{split_points!r}]"
        )
    if split_points:
        # A container's name cuts before its first part ("seq2" = "seq2.0", "transformer.h" = "transformer.h.0").
        points = [p if p in parts else next((q for q in parts if q.startswith(f"{p}.")), p) for p in split_points]
        if len(points) != num_stages - 1:
            raise ValueError(
                f"{num_stages} pipeline stages need {num_stages - 1} split points; got {len(points)}: {points}"
            )
        missing = [p for p in points if p not in parts]
        if missing:
            raise ValueError(
                f"split point(s) {missing} name no part of {owner}; a split point is a top-level child or a member of a "
                f"top-level container (or of a list or dict inside one), one of: {', '.join(parts)}"
            )
        cuts = [parts.index(p) for p in points]
        if cuts != sorted(set(cuts)) or cuts[0] == 0:
            raise ValueError(
                f"split points {points} must be in the model's order, distinct, and not its first part {parts[0]!r}"
            )
    else:
        cuts = _balanced_cuts([_parameter_count(module.get_submodule(p)) for p in parts], num_stages)
    bounds = [0, *cuts, len(parts)]
    return [parts[a:b] for a, b in zip(bounds, bounds[1:])]


def _nested_blocks(module: nn.Module, num_stages: int) -> tuple[str, int] | None:
    """The first container below the top level with at least ``num_stages`` members (blocks
    held one level down, ``self.model.layers``): its dotted name and size."""
    for name, child in module.named_modules():
        if "." in name and isinstance(child, _CONTAINERS) and len(child._modules) >= num_stages:
            return name, len(child._modules)
    return None


def _parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _balanced_cuts(sizes: list[int], num_stages: int) -> list[int]:
    """Cut points giving each stage about ``1/num_stages`` of the parameters, each stage non-empty."""
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    total, cuts, previous = prefix[-1], [], 0
    for k in range(1, num_stages):
        candidates = range(previous + 1, len(sizes) - (num_stages - k) + 1)
        best = min(candidates, key=lambda c: abs(prefix[c] - k * total / num_stages))
        cuts.append(best)
        previous = best
    return cuts


@dataclass
class _DroppedParts:
    """What ``keep_only`` dropped from a model built on meta: the whole model's parts, in place."""

    children: dict[str, nn.Module] = field(default_factory=dict)  # top-level child name: the child
    members: dict[str, list[tuple[str, nn.Module | None]]] = field(default_factory=dict)  # every member, in order


# Models built on meta whose pipeline cut dropped parts (no data: they cost nothing to keep), until
# materialize replays their initialisers so that the kept stages draw as the eager build does.
_DROPPED_ON_META: weakref.WeakKeyDictionary[nn.Module, _DroppedParts] = weakref.WeakKeyDictionary()


def keep_only(module: nn.Module, parts: set[str]) -> None:
    """Drop, in place, every part not in ``parts`` (names of the rest are unchanged)."""
    dropped = _DroppedParts()
    for name in pipeline_parts(module):
        if name in parts:
            continue
        container, _, member = name.rpartition(".")
        if container:
            holder = module.get_submodule(container)
            dropped.members.setdefault(container, list(holder._modules.items()))  # before the first removal
            del holder._modules[member]  # not `del seq[i]`: that renumbers
        else:
            child = module._modules[name]
            if child is not None:  # a part: never None
                dropped.children[name] = child
            setattr(module, name, None)
    on_meta = [t.is_meta for part in dropped.children.values() for t in [*part.parameters(), *part.buffers()]]
    on_meta += [
        t.is_meta
        for every in dropped.members.values()
        for _, m in every
        if m is not None
        for t in [*m.parameters(), *m.buffers()]
    ]
    if on_meta and all(on_meta):
        _DROPPED_ON_META[module] = dropped


@contextmanager
def whole_model_on_meta(module: nn.Module) -> Iterator[bool]:
    """Put back, for the duration, the parts the pipeline cut dropped from a model built on meta
    (their tensors still on meta); yields whether there were any. Once only: the record goes."""
    dropped = _DROPPED_ON_META.pop(module, None)
    if dropped is None:
        yield False
        return
    kept = {name: module.get_submodule(name)._modules for name in dropped.members}
    for name, every in dropped.members.items():
        module.get_submodule(name)._modules = dict(every)
    for name, child in dropped.children.items():
        module._modules[name] = child
    try:
        yield True
    finally:
        for name in dropped.children:
            module._modules[name] = None
        for name, members in kept.items():
            module.get_submodule(name)._modules = members


def stage_view(module: nn.Module, parts: set[str]) -> nn.Module:
    """A module sharing ``module``'s layers (the same objects) that holds only ``parts``: one
    stage of a rank that holds several. Sharding or splitting a layer shows in both."""
    view = copy.copy(module)
    view._modules = dict(module._modules)
    for name, child in module._modules.items():
        if child is None:
            continue
        if isinstance(child, _CONTAINERS):
            view._modules[name] = _container_view(child, name, parts)
        elif name not in parts:
            view._modules[name] = None
    return view


def _container_view(container: nn.Module, name: str, parts: set[str]) -> nn.Module:
    """``container`` holding only its members in ``parts``; a list or dict inside it, likewise."""
    kept = copy.copy(container)
    kept._modules = {}
    for key, member in container._modules.items():
        if isinstance(member, ITERATED):
            kept._modules[key] = _container_view(member, f"{name}.{key}", parts)
        elif f"{name}.{key}" in parts:
            kept._modules[key] = member
    return kept
