"""The DeviceMeshes trainmesh makes, kept for the next run of the same layout.

A mesh of several dimensions makes a process group per dimension, and torch keeps each one
(with its threads and sockets) in its registry until it is destroyed. Runs in one process
group (a k-fold loop, a sweep, a notebook, the test suite's batched legs) built a new mesh per
fit: on each rank of a 2 x 2 mesh, 2 gloo groups, 6 threads and 10 fds more per fit, for good.

Destroying a run's groups when it ends is not the way out, for two reasons measured on torch
2.13: the model it trained keeps using them after fit (its DTensors' collectives,
``Trainer.save_checkpoint``, a later ``test``), as Lightning's does (its strategies never
destroy their mesh); and torch's DTensor caches (the sharding propagator's ``lru_cache``) hold
meshes that compare equal by layout alone, so the next run's tensors were handed the old mesh
and failed with "Could not resolve the process group registered under the name 3". So a mesh
is made once per layout and default group, and every later run of that layout reuses it: the
groups stay bounded by the number of layouts a process runs, and the cached meshes stay valid.

Whether to reuse is agreed by every rank on the default group first: torch's ``new_group`` must
be called by every rank in the same order, so one rank whose kept mesh lost a group (a user
destroyed it there) makes every rank build anew (the old one is left as it is). A mesh a user
made is never kept or touched here.
"""

from __future__ import annotations

from typing import Any

# (device type, shape, dimension names) -> (the default group it was made under, the mesh)
_meshes: dict[tuple[str, tuple[int, ...], tuple[str, ...]], tuple[Any, Any]] = {}


def shared_device_mesh(device_type: str, shape: tuple[int, ...], names: tuple[str, ...]) -> Any:
    """``init_device_mesh(device_type, shape, mesh_dim_names=names)``, or the one an earlier run
    of this layout made under the same default group, where every rank still holds all its
    groups. Collective over the default group: every rank calls it, in the same order."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    key = (device_type, tuple(shape), tuple(names))
    default = dist.distributed_c10d._get_default_group()
    kept = _meshes.get(key)
    usable = kept is not None and kept[0] is default and all(_alive(group) for group in _groups(kept[1]))
    # the default group's own device: NCCL's is the current GPU, gloo's the CPU
    on_gpu = device_type == "cuda" and dist.get_backend(default) != "gloo"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    agreed = torch.tensor([int(usable)], device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    if kept is not None and bool(agreed.item()):
        return kept[1]
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=names)
    _meshes[key] = (default, mesh)
    return mesh


def _groups(mesh: Any) -> list[Any]:
    """The groups a mesh made: its dimensions' and its flattened views' (torch registers both
    in the root mesh's registry), never the default group (which a dimension over every
    process reuses)."""
    import torch.distributed as dist

    default = dist.distributed_c10d._get_default_group()
    registry = getattr(mesh._get_root_mesh(), "_pg_registry", {})
    return [group for group in registry.values() if group is not default]


def _alive(group: Any) -> bool:
    import torch.distributed as dist

    return group in dist.distributed_c10d._world.pg_map
