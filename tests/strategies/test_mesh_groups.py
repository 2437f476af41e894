"""A DeviceMesh that makes groups is made once per layout and default group (mesh_groups.py).

The 4-process check (successive fits, one failing, end with the same groups, threads and fds)
shares test_mesh.py's launch; here one gloo process checks when a kept mesh is reused."""

import types

import torch.distributed as dist
import torch.distributed.device_mesh as torch_mesh

from trainmesh.strategies import mesh_groups


def test_a_layout_is_made_once_and_made_anew_when_its_group_or_the_default_group_is_gone(monkeypatch):
    made = []

    def init_device_mesh(device_type, shape, mesh_dim_names):
        mesh = types.SimpleNamespace(_pg_registry={"dim": dist.new_group([0])}, shape=shape)
        mesh._get_root_mesh = lambda: mesh
        made.append(mesh)
        return mesh

    monkeypatch.setattr(torch_mesh, "init_device_mesh", init_device_mesh)
    monkeypatch.setattr(mesh_groups, "_meshes", {})
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        first = mesh_groups.shared_device_mesh("cpu", (1, 1), ("dp_shard", "tp"))
        assert mesh_groups.shared_device_mesh("cpu", (1, 1), ("dp_shard", "tp")) is first  # no new group
        other = mesh_groups.shared_device_mesh("cpu", (1, 1), ("pp", "tp"))
        assert other is not first and len(made) == 2
        dist.destroy_process_group(first._pg_registry["dim"])  # a user destroyed one of its groups
        assert mesh_groups.shared_device_mesh("cpu", (1, 1), ("dp_shard", "tp")) is made[2]
    finally:
        dist.destroy_process_group()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:  # a new default group: the old meshes' groups went with the old one
        assert mesh_groups.shared_device_mesh("cpu", (1, 1), ("pp", "tp")) is made[3]
    finally:
        dist.destroy_process_group()
