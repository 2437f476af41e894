"""Tied weights (one ``nn.Parameter`` registered under several names, as GPT-2's or Gemma's
output head shares the token embedding's matrix) kept tied under tensor and pipeline parallelism.

Found before anything is split (``tied_parameters``; ``TieRecorder`` for the ties a model's own
``configure_model(mesh)`` makes or splits with ``parallelize_module``), then:

- tensor parallel (``retie_after_tp``): ``parallelize_module`` converts each plan entry's
  parameters to a new DTensor parameter, so the two names end up holding two separate copies.
  Where both sides got the same placements the second name is pointed back at the first's
  DTensor: one parameter again, both uses' gradients accumulating into it as on one process.
  Different placements (or one side left whole) cannot be one tensor: refused, naming both.
- pipeline parallel (``StageCopies``): the uses sit on different stages, so each stage holding
  one keeps its own copy (Megatron's and torch's pipelining way): made equal at setup (sent
  from the first holder), their gradients summed over the ``pp`` axis once a step's gradients
  are final (after data parallel's reduction), so both copies take the same optimizer update
  and stay bit-equal. Clipping counts the copy's gradient once (on the first holder).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from trainmesh.utilities.dtensors import is_dtensor


def tied_parameters(module: nn.Module) -> list[tuple[str, ...]]:
    """The names of each parameter registered under two or more names, in registration order.

    >>> m = nn.Module(); m.a = nn.Linear(2, 3, bias=False); m.b = nn.Linear(2, 3, bias=False)
    >>> m.b.weight = m.a.weight
    >>> tied_parameters(m)
    [('a.weight', 'b.weight')]
    """
    names: dict[int, list[str]] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return [tuple(group) for group in names.values() if len(group) > 1]


def held_names(module: nn.Module, group: Iterable[str]) -> list[str]:
    """The names of ``group`` this rank's module still holds (a pipeline stage drops the rest)."""
    held = {name for name, _ in module.named_parameters(remove_duplicate=False)}
    return [name for name in group if name in held]


def layout(tensor: torch.Tensor) -> str:
    """How a parameter is laid out across ranks, for comparison and messages."""
    if not is_dtensor(tensor):
        return f"whole (not split), shape {tuple(tensor.shape)}"
    mesh = tensor.device_mesh
    return f"{tuple(tensor.placements)} on mesh {tuple(mesh.mesh_dim_names or ())}, shape {tuple(tensor.shape)}"


def _differ(names: Mapping[str, str]) -> str:
    return "; ".join(f"{name}: {where}" for name, where in names.items())


PLAN = "tensor_parallel_plan()"
OWN_PLAN = "the parallelize_module plan configure_model(mesh) applies"


def refuse_different_layouts(group: tuple[str, ...], layouts: Mapping[str, str], *, how: str, plan: str = PLAN) -> None:
    """Raise if the names of one tied parameter were split in different ways."""
    if len(set(layouts.values())) > 1:
        raise ValueError(
            f"{' and '.join(group)} are one tied parameter, but {how} splits them differently "
            f"({_differ(layouts)}), so they cannot stay one tensor and would train as separate weights. "
            f"Give both the same placement in {plan} (e.g. the embedding RowwiseParallel and "
            "the output ColwiseParallel: both Shard(0) over the vocabulary), or leave both out of the plan, "
            "or untie them in the model (give the output its own nn.Parameter)"
        )


def retie_after_tp(module: nn.Module, ties: list[tuple[str, ...]], *, plan: str = PLAN) -> None:
    """After ``parallelize_module``: each tied group this module holds is one parameter again
    (``plan``: where the split was asked for, named in a refusal)."""
    for group in ties:
        names = held_names(module, group)
        parameters = {name: module.get_parameter(name) for name in names}
        first = parameters[names[0]] if names else None
        if all(p is first for p in parameters.values()):
            continue  # left alone by the plan: still one parameter
        refuse_different_layouts(
            group, {name: layout(p) for name, p in parameters.items()}, how="the tensor-parallel plan", plan=plan
        )
        for name in names[1:]:
            owner, _, attribute = name.rpartition(".")
            setattr(module.get_submodule(owner), attribute, first)


class TieRecorder:
    """Every place (module, attribute) each parameter was registered at while ``recording()``,
    the replaced one included: a tie made or split inside ``configure_model(mesh)`` (the model's
    own ``parallelize_module`` gives each name a new DTensor parameter) leaves no trace in the
    finished model, but the original parameter was registered under both names here.

    torch's global parameter-registration hook sees ``register_parameter`` and attribute
    assignment (``parallelize_module`` and ``self.b.weight = self.a.weight`` both go through it);
    a parameter written straight into ``_parameters`` is not seen. Each recorded parameter is
    held (so that no other object takes its ``id``) until ``ties()`` reads them at
    ``setup_module``; once the build ends, only those registered under two or more names.
    """

    def __init__(self) -> None:
        self._places: dict[int, list[tuple[nn.Module, str]]] = {}
        self._held: dict[int, nn.Parameter] = {}
        self._watched: dict[int, weakref.ref[nn.Parameter]] = {}

    @contextlib.contextmanager
    def recording(self, device: str) -> Iterator[None]:
        """Record while building on ``device`` (the default device inside)."""
        from torch.nn.modules.module import register_module_parameter_registration_hook

        handle = register_module_parameter_registration_hook(self._record)
        try:
            with torch.device(device):
                yield
        finally:
            handle.remove()
            for key in [key for key, places in self._places.items() if len(places) < 2 and key in self._held]:
                self._forget(key)  # under one name only: no tie, nothing to hold

    def _record(self, module: nn.Module, name: str, parameter: nn.Parameter) -> None:
        replaced = module._parameters.get(name)
        if replaced is not None:
            self._note(replaced, module, name, hold=False)
        self._note(parameter, module, name, hold=True)

    def _note(self, parameter: nn.Parameter, module: nn.Module, name: str, *, hold: bool) -> None:
        key = id(parameter)
        places = self._places.setdefault(key, [])
        if not any(owner is module and attribute == name for owner, attribute in places):
            places.append((module, name))
        if hold or len(places) > 1 or key in self._held:
            self._held[key] = parameter
            self._watched.pop(key, None)
        elif key not in self._watched:
            # Made before recording and replaced now (an eager model's weight that its own
            # parallelize_module splits): held weakly, so that the whole weight is freed as
            # without recording; its entry goes with it, before another object can take its id.
            # Alive after the build, it is still held elsewhere: under another name, perhaps.
            self._watched[key] = weakref.ref(parameter, functools.partial(self._freed, key))

    def _freed(self, key: int, _: object) -> None:
        self._forget(key)

    def _forget(self, key: int) -> None:
        self._places.pop(key, None)
        self._held.pop(key, None)
        self._watched.pop(key, None)

    def _original(self, key: int) -> nn.Parameter | None:
        if key in self._held:
            return self._held[key]
        watched = self._watched.get(key)
        return watched() if watched is not None else None

    def ties(self, module: nn.Module) -> list[tuple[str, ...]]:
        """``module``'s tied groups: those still one parameter and those split while recording
        (each side now a DTensor, or the original on a side left whole). A side holding another
        plain parameter was replaced by the model itself: untied on purpose, left alone."""
        groups = [set(group) for group in tied_parameters(module)]
        current = dict(module.named_parameters(remove_duplicate=False))
        prefixes: dict[int, list[str]] = {}
        for prefix, submodule in module.named_modules(remove_duplicate=False):
            prefixes.setdefault(id(submodule), []).append(prefix)
        for key, places in self._places.items():
            original = self._original(key)
            names = {
                f"{prefix}.{attribute}" if prefix else attribute
                for owner, attribute in places
                for prefix in prefixes.get(id(owner), [])
            } & current.keys() | {name for name, p in current.items() if p is original}
            held = [current[name] for name in names]
            if len(names) < 2 or all(p is held[0] for p in held):
                continue  # not shared, or still one parameter (tied_parameters has it)
            if all(p is original or is_dtensor(p) for p in held):
                groups.append(names)
        self._places.clear()
        self._held.clear()
        self._watched.clear()
        return _merged(groups, list(current))


def _merged(groups: list[set[str]], order: list[str]) -> list[tuple[str, ...]]:
    """Overlapping groups joined, each in registration order, in order of their first name."""
    joined: list[set[str]] = []
    for group in groups:
        for other in [g for g in joined if g & group]:
            group = group | other
            joined.remove(other)
        joined.append(group)
    position = {name: index for index, name in enumerate(order)}
    return sorted((tuple(sorted(g, key=position.__getitem__)) for g in joined), key=lambda g: position[g[0]])


@dataclasses.dataclass(frozen=True)
class _Copies:
    """One tied parameter held on several pipeline ranks: its names on this rank (empty where
    this rank holds none), the pp ranks holding it, and its local shape and dtype."""

    names: tuple[str, ...]
    holders: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: torch.dtype


class StageCopies:
    """The tied parameters whose uses sit on different pipeline ranks, and what keeps them one.

    Built after the cut and tensor parallelism, before data parallelism: ``StageCopies.build``
    is a collective over ``pp`` (every pipeline rank calls it).
    """

    def __init__(self, copies: list[_Copies], pp_rank: int, group: Any) -> None:
        self.copies, self.pp_rank, self.group = copies, pp_rank, group

    @classmethod
    def build(
        cls,
        module: nn.Module,
        ties: list[tuple[str, ...]],
        *,
        stage_parts: Mapping[int, list[str]],
        sharded_by_data_parallel: bool,
        pp_rank: int,
        mesh: Any,
        device: torch.device,
        equalize: bool = True,
    ) -> StageCopies:
        from trainmesh.strategies import collectives

        mine = []
        for group in ties:
            names = held_names(module, group)
            local = _local(module.get_parameter(names[0])) if names else None
            mine.append(
                (
                    names,
                    layout(module.get_parameter(names[0])) if names else None,
                    (tuple(local.shape), local.dtype) if local is not None else None,
                    _stages_using(names, stage_parts),
                )
            )
        # Every pipeline rank learns every rank's view, so that a refusal stops all of them alike.
        everyone = collectives.all_gather_object(mesh, mine, over="pp")
        copies = []
        for index, group in enumerate(ties):
            held = {rank: ranks_view[index] for rank, ranks_view in enumerate(everyone) if ranks_view[index][0]}
            for _, _, _, stages in held.values():
                _refuse_two_stages_of_one_rank(group, stages, sharded_by_data_parallel)
            if len(held) < 2:
                continue  # every use on one rank: the parameter is one object there
            refuse_different_layouts(
                group,
                {", ".join(names): where for names, where, _, _ in held.values()},
                how="the pipeline stages' tensor parallelism",
            )
            shape, dtype = next(iter(held.values()))[2]
            copies.append(_Copies(tuple(mine[index][0]), tuple(sorted(held)), shape, dtype))
        if copies and not equalize and sharded_by_data_parallel and len(everyone) > 2:
            # Made equal after sharding, a stage without the weight could not know its shard's shape.
            raise ValueError(
                f"tied weights {', '.join(ties[0])} on a model built on the meta device, with more than 2 "
                "pipeline stages and data parallelism sharding them, are not supported: build the model "
                "eagerly (outside configure_model), use 2 pipeline stages, or untie the weights"
            )
        built = cls(copies, pp_rank, mesh.group("pp"))
        if equalize:
            built.make_equal(module, device)
        return built

    def _tensor(self, module: nn.Module, copy: _Copies, *, grad: bool) -> torch.Tensor | None:
        if not copy.names:
            return None
        parameter = module.get_parameter(copy.names[0])
        value = parameter.grad if grad else parameter
        return _local(value) if value is not None else None

    def make_equal(self, module: nn.Module, device: torch.device) -> None:
        """Every copy takes the first holder's values (each stage's model may have drawn its own)."""
        import torch.distributed as dist

        for copy in self.copies:
            local = self._tensor(module, copy, grad=False)
            buffer = (
                local.detach().clone()
                if local is not None
                else torch.empty(copy.shape, dtype=copy.dtype, device=device)
            )
            dist.broadcast(buffer, group=self.group, group_src=copy.holders[0])
            if local is not None:
                with torch.no_grad():
                    local.copy_(buffer)

    def sum_gradients(self, module: nn.Module, device: torch.device) -> None:
        """Each copy's gradient becomes the sum of every copy's (the tied parameter's gradient)."""
        import torch.distributed as dist

        for copy in self.copies:
            if copy.names:
                _grad_laid_out_as_parameter(module.get_parameter(copy.names[0]))
            local = self._tensor(module, copy, grad=True)
            buffer = local if local is not None else torch.zeros(copy.shape, dtype=copy.dtype, device=device)
            dist.all_reduce(buffer, group=self.group)

    def counted_elsewhere(self, module: nn.Module) -> set[int]:
        """Ids of this rank's copies whose gradient the first holder counts in the global norm."""
        return {
            id(module.get_parameter(copy.names[0]))
            for copy in self.copies
            if copy.names and copy.holders[0] != self.pp_rank
        }


def _grad_laid_out_as_parameter(parameter: nn.Parameter) -> None:
    """Give ``parameter`` a gradient split as it is (zeros if it has none), so that the copies'
    local pieces hold the same elements on every stage. A tensor-parallel gradient may come
    otherwise: a RowwiseParallel embedding's is Replicate() while its weight is Shard(0)."""
    grad = parameter.grad
    if grad is None:
        parameter.grad = torch.zeros_like(parameter)
    elif is_dtensor(grad) and is_dtensor(parameter) and tuple(grad.placements) != tuple(parameter.placements):
        parameter.grad = grad.redistribute(parameter.device_mesh, parameter.placements)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's piece of a (DTensor) tensor: a view sharing its memory (written in place)."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _stages_using(names: list[str], stage_parts: Mapping[int, list[str]]) -> list[int]:
    """This rank's stages whose parts hold one of ``names``."""
    return sorted(
        {
            index
            for name in names
            for index, parts in stage_parts.items()
            if any(name == part or name.startswith(part + ".") for part in parts)
        }
    )


def _refuse_two_stages_of_one_rank(group: tuple[str, ...], stages: list[int], sharded_by_data_parallel: bool) -> None:
    """One rank holding the uses in two of its stages shares the object between the stages;
    data parallelism would shard each stage's use apart."""
    if sharded_by_data_parallel and len(stages) > 1:
        raise ValueError(
            f"{' and '.join(group)} are one tied parameter used by pipeline stages {sorted(stages)}, which this "
            "schedule places on one rank; data parallelism shards each stage on its own and would split the tie "
            "into two weights. Use a looped schedule (1F1B, Interleaved1F1B), which puts those stages on "
            "different ranks, or train without data parallelism (dp_shard=1, dp_replicate=1), or untie them"
        )
