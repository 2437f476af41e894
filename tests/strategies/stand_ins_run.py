"""Two ranks (gloo, tp=2): models built on meta, split by tensor parallelism and materialised;
saves what tests/strategies/test_stand_ins.py checks.

    python stand_ins_run.py OUT.pt
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.llama import Llama, LlamaConfig  # noqa: E402


class HeldBytes(TorchDispatchMode):
    """After every op, the bytes the model's plain parameters (the whole stand-ins of its sharded
    ones, and the unsharded ones) hold: read from their storages without touching them."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model, self.peak = model, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        with torch._C.DisableTorchFunction():  # a peek, not a use: no stand-in is allocated by it
            held = sum(p.untyped_storage().nbytes() for p in self.model.parameters() if not is_sharded(p))
        self.peak = max(self.peak, held)
        return result


def is_sharded(tensor: torch.Tensor) -> bool:
    from trainmesh.utilities.dtensors import is_dtensor

    return is_dtensor(tensor)


class Revisiting(nn.Module):
    """An init_weights() that goes back to tensors after others were drawn (so their stand-ins
    were evicted to their shards and must be gathered back), writes parts of them, reads one
    through tolist() (no aten op) and draws by rejection (trunc_normal_ reads what it drew)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(16, 32), nn.Linear(16, 32), nn.Linear(32, 16)
        self.d = nn.Linear(16, 32, bias=False)
        if not self.a.weight.is_meta:  # the eager build (on meta, trainmesh calls it after the split)
            self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        for linear in (self.a, self.b, self.c):
            nn.init.normal_(linear.weight)
        self.a.weight[:, :3].mul_(2)  # a was evicted (three drawn, two fit): gathered back, then part-written
        self.d.weight.copy_(self.a.weight + self.b.weight)
        first_row = self.c.weight[0].tolist()
        self.c.bias.fill_(sum(first_row))
        nn.init.trunc_normal_(self.b.weight, std=0.5)


def whole(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.full_tensor() if hasattr(v, "full_tensor") else v.clone() for k, v in state.items()}


def build(factory, plan, mesh):
    from torch.distributed.tensor.parallel import parallelize_module

    from trainmesh.strategies.materialize import materialize

    torch.manual_seed(0)
    eager = factory()
    torch.manual_seed(0)
    with torch.device("meta"):
        model = factory()
    parallelize_module(model, mesh, plan(model))
    held = HeldBytes(model)
    with held:
        materialize(model, torch.device("cpu"))
    return whole(eager.state_dict()), whole(model.state_dict()), held.peak, eager


def revisiting_plan(model):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"a": ColwiseParallel(), "b": ColwiseParallel(), "c": RowwiseParallel(), "d": ColwiseParallel()}


def worker(rank: int, port: int, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    config = LlamaConfig(vocab=256, n_layers=4)
    llama = build(lambda: Llama(config), Llama.tensor_parallel_plan, mesh)
    revisiting = build(Revisiting, revisiting_plan, mesh)
    if rank == 0:
        model = llama[3]
        sharded = set(revisiting_plan(None)) | {k.rsplit(".", 1)[0] for k in model.tensor_parallel_plan()}
        unsharded = [p for name, p in model.named_parameters() if "norm" in name]
        torch.save(
            {
                "llama": llama[:3],
                "revisiting": revisiting[:3],
                "llama_whole_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
                "llama_unsharded_bytes": sum(p.numel() * p.element_size() for p in unsharded),
                "llama_largest_bytes": max(p.numel() * p.element_size() for p in model.parameters()),
                "plan": sorted(sharded),
            },
            out,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    from trainmesh.launchers.environments import find_free_port

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # Forks where the test forked this process with torch loaded (TESTS_WORKERS, helpers/batches.py).
    start = "fork" if os.environ.get("TESTS_WORKERS") == "fork" else "spawn"
    mp.start_processes(worker, args=(find_free_port(), sys.argv[1]), nprocs=2, start_method=start)
