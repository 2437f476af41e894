"""The processes of test_mesh.py: one run of 4 gloo processes that checks the named mesh.

python mesh_run.py OUT_DIR  -> each rank writes OUT_DIR/rank{R}.json with what it saw

The Runtime (hsdp, 2 shard groups of 2) makes the process group, or under the test (4 forks in
one group, helpers/forked.py) finds it made; every check below shares it. Each check is recorded, not
asserted, so that the test can say which one is wrong on which rank.
"""

import faulthandler
import gc
import json
import os
import sys

import torch
from torch.distributed import distributed_c10d
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from trainmesh.strategies import collectives, lightning_model_parallel
from trainmesh.strategies.fsdp import FSDPStrategy
from trainmesh.strategies.mesh import ParallelDims, ParallelMesh
from trainmesh.strategies.sampling import shard_dataloader


def read_indices(loader) -> list[int]:
    return [int(i) for (batch,) in loader for i in batch]


def build_and_count(r: int, world: int) -> dict:
    """What each fit of a fsdp_tp run builds, trainmesh's mesh and Lightning's named one (its
    ModelParallelStrategy form), then this rank's groups, threads, fds."""
    ParallelMesh.build(ParallelDims(dp_shard=2, tp=2), global_rank=r, world_size=world, device_type="cpu")
    lightning_model_parallel.build_device_mesh("cpu", 2, 2)
    gc.collect()
    return {
        "groups": len(distributed_c10d._world.pg_map),
        "threads": len(os.listdir("/proc/self/task")),
        "fds": len(os.listdir("/proc/self/fd")),
    }


def check(runtime: tm.Runtime, out_dir: str) -> None:
    r, world = runtime.global_rank, runtime.world_size
    seen: dict = {"global_rank": r, "world_size": world}

    # a. tp=2 x dp_replicate=2; our coordinates against the DeviceMesh's own.
    mesh = ParallelMesh.build(
        ParallelDims(dp_replicate=2, dp_shard=1, tp=2), global_rank=r, world_size=world, device_type="cpu"
    )
    device_mesh = mesh.device_mesh
    seen["tp_mesh"] = {
        "dim_names": list(device_mesh.mesh_dim_names),
        "layout": device_mesh.mesh.tolist(),
        "dp_rank": mesh.dp_rank,
        "dp_size": mesh.dp_size,
        "tp": mesh.rank("tp"),
        "dp_replicate": mesh.rank("dp_replicate"),
        "dp_shard": mesh.rank("dp_shard"),
        "torch_tp": device_mesh.get_local_rank("tp"),
        "torch_dp_replicate": device_mesh.get_local_rank("dp_replicate"),
    }

    # b. data sharded by the data-parallel rank: in order, and shuffled with one seed. No
    # collective here, so an error is recorded for the test to show and the run goes on.
    data = TensorDataset(torch.arange(40))
    seen["samples"] = {}
    for name, shuffle in (("in_order", False), ("shuffled", True)):
        try:
            seen["samples"][name] = read_indices(
                shard_dataloader(
                    DataLoader(data, batch_size=4, shuffle=shuffle),
                    dp_rank=mesh.dp_rank,
                    dp_size=mesh.dp_size,
                    train=True,
                    seed=0,
                )
            )
        except Exception as error:  # noqa: BLE001
            seen["samples"][name] = f"{type(error).__name__}: {error}"

    # c. reductions over the data-parallel group and over tp.
    value = torch.tensor(float(r))
    seen["tp_mesh_reduce"] = {
        "dp_sum": collectives.reduce(mesh, value, "sum", over="dp").item(),
        "dp_mean": collectives.reduce(mesh, value, "mean", over="dp").item(),
        "dp_max": collectives.reduce(mesh, value, "max", over="dp").item(),
        "tp_sum": collectives.reduce(mesh, value, "sum", over="tp").item(),
        "dp_gather": collectives.all_gather(mesh, torch.tensor([r]), over="dp").tolist(),
        "dp_gather_object": collectives.all_gather_object(mesh, f"rank{r}", over="dp"),
        "world_gather_object": collectives.all_gather_object(mesh, r),
        "value_after": value.item(),  # reduce must not change its argument
    }

    # d. the hsdp layout, dp_replicate=2 x dp_shard=2: pure data parallelism on a 2-D mesh.
    hsdp = ParallelMesh.build(
        ParallelDims(dp_replicate=2, dp_shard=2), global_rank=r, world_size=world, device_type="cpu"
    )
    seen["dp_mesh"] = {
        "dim_names": list(hsdp.device_mesh.mesh_dim_names),
        "dp_rank": hsdp.dp_rank,
        "dp_size": hsdp.dp_size,
        "dp_replicate": hsdp.rank("dp_replicate"),
        "dp_shard": hsdp.rank("dp_shard"),
        "torch_dp_replicate": hsdp.device_mesh.get_local_rank("dp_replicate"),
        "torch_dp_shard": hsdp.device_mesh.get_local_rank("dp_shard"),
        "dp_sum": collectives.reduce(hsdp, value, "sum", over="dp").item(),
        "dp_shard_sum": collectives.reduce(hsdp, value, "sum", over="dp_shard").item(),
        "dp_replicate_sum": collectives.reduce(hsdp, value, "sum", over="dp_replicate").item(),
        "dp_shard_gather": collectives.all_gather(hsdp, torch.tensor([r]), over="dp_shard").tolist(),
    }

    # e. the Runtime of this hsdp run: its mesh and its training loader.
    loader = runtime.setup_dataloaders(DataLoader(data, batch_size=4))
    seen["runtime"] = {
        "dp_rank": runtime.mesh.dp_rank,
        "dp_size": runtime.mesh.dp_size,
        "dp_replicate": runtime.mesh.dims.dp_replicate,
        "dp_shard": runtime.mesh.dims.dp_shard,
        "sampler": type(loader.sampler).__name__,
        "num_replicas": loader.sampler.num_replicas,
        "rank": loader.sampler.rank,
        "samples": read_indices(loader),
        "all_reduce_sum": runtime.all_reduce(value, "sum").item(),
    }

    # f. successive runs in this process group make no more groups, threads or fds than the
    # first: the meshes a run builds are kept for the next run of their layout (k-fold loops).
    seen["groups_after_runs"] = [build_and_count(r, world) for _ in range(3)]

    path = os.path.join(out_dir, f"rank{r}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(seen, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    # A hang prints every stack and ends the process well before the test's timeout.
    faulthandler.dump_traceback_later(int(os.environ.get("LEG_WATCHDOG_S", "120")), exit=True)
    runtime = tm.Runtime(accelerator="cpu", devices=4, strategy=FSDPStrategy(shard_size=2))
    runtime.launch(check, runtime, sys.argv[1])  # re-runs this script once per process
