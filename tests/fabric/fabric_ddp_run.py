"""A Lightning Fabric program on 2 CPU processes (``strategy="ddp"``, ``launch()``):
``python fabric_ddp_run.py lightning|trainmesh OUT``.

Each process trains with gradient accumulation (``no_backward_sync``), clips by value, logs the
mean loss into Fabric's CSVLogger, calls a callback's hook, runs a method marked as a forward
through the strategy's wrapper, gathers, broadcasts, saves and loads a checkpoint, and writes its
record to ``OUT/rank<r>.pt``: the sample indices it read, the weights, the collectives' results.
Then a second Fabric on the same processes, ``ModelParallelStrategy(parallelize_fn)`` (Fabric's form),
tensor-parallel over both ranks with torch's own ``parallelize_module`` on a module built under
``init_module(empty_init=True)``: the mesh ``parallelize_fn`` is given, and the whole weights after 3 steps.
"""

from __future__ import annotations

import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

if sys.argv[1] == "lightning":
    from lightning.fabric import Fabric
    from lightning.fabric.loggers import CSVLogger
    from lightning.fabric.strategies import ModelParallelStrategy
else:
    from trainmesh import Fabric
    from trainmesh.fabric.loggers import CSVLogger
    from trainmesh.fabric.strategies import ModelParallelStrategy

OUT = sys.argv[2]


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

    def forward(self, x):
        return self.body(x)

    def scaled(self, x):  # a method the program marks as a forward
        return 2 * self.body(x)


class Recorder:
    def __init__(self) -> None:
        self.calls: list = []

    def on_train_epoch_end(self, epoch):
        self.calls.append(epoch)


def main() -> None:
    recorder = Recorder()
    fabric = Fabric(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        callbacks=[recorder],
        loggers=CSVLogger(OUT, flush_logs_every_n_steps=4),
    )
    fabric.launch()
    fabric.seed_everything(7, verbose=False)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    model.mark_forward_method("scaled")
    x = torch.randn(60, 8)
    y = (x[:, 0] > 0).long()
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(x, y, torch.arange(60)), batch_size=6, shuffle=True))
    seen, step = [], 0
    for epoch in range(2):
        for i, (xb, yb, index) in enumerate(loader):
            seen.append(index.tolist())
            sync = i % 2 == 1
            with fabric.no_backward_sync(model, enabled=not sync):
                out = model.scaled(xb) if i == 1 else model(xb)  # a synchronising step
                loss = torch.nn.functional.cross_entropy(out, yb)
                fabric.backward(loss)
            if sync:
                fabric.clip_gradients(model, optimizer, clip_val=0.5)
                optimizer.step()
                optimizer.zero_grad()
            fabric.log("loss", fabric.all_reduce(loss.detach()), step=step)
            step += 1
        fabric.call("on_train_epoch_end", epoch)
    with fabric.rank_zero_first():
        first = fabric.global_rank
    gathered = fabric.all_gather({"rank": torch.tensor([fabric.global_rank])})
    sent = fabric.broadcast({"from": fabric.global_rank}, src=1)
    total = fabric.all_reduce(torch.tensor(float(fabric.global_rank + 1)), reduce_op="sum")
    # Fabric reduces the caller's tensor in place (a program may not read the result), an integer mean
    # truncated into the integer tensor
    count = torch.tensor([fabric.global_rank + 1])
    fabric.all_reduce(count, reduce_op="sum")
    ints = fabric.all_reduce(torch.tensor([3 + fabric.global_rank]))
    path = os.path.join(OUT, "state.ckpt")
    fabric.save(path, {"model": model, "optimizer": optimizer, "step": step})
    state = {"model": model, "optimizer": optimizer, "step": -1}
    fabric.load(path, state)
    fabric.logger.finalize("success")
    record = {
        "seen": seen,
        "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "gathered": gathered["rank"].tolist(),
        "sent": sent,
        "total": total.item(),
        "in_place": (count.tolist(), ints.tolist(), str(ints.dtype)),
        "first": first,
        "step": state["step"],
        "calls": recorder.calls,
        "ranks": (fabric.global_rank, fabric.local_rank, fabric.world_size, fabric.is_global_zero),
        # the set-up module's tree as a program walks it: DDP around the user's module, nothing between
        "names": ([n for n, _ in model.named_modules()], [n for n, _ in model.named_parameters()]),
        "model_parallel": tensor_parallel(),
    }
    torch.save(record, os.path.join(OUT, f"rank{fabric.global_rank}.pt"))


def tensor_parallel() -> tuple:
    """Fabric's form of ModelParallelStrategy: the mesh parallelize_fn sees, the whole weights after 3 steps."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    meshes = []

    def parallelize(module, mesh):
        meshes.append((mesh.mesh_dim_names, tuple(mesh.shape)))
        parallelize_module(module.body, mesh["tensor_parallel"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        return module

    fabric = Fabric(accelerator="cpu", devices=2, strategy=ModelParallelStrategy(parallelize, tensor_parallel_size=2))
    fabric.launch()
    torch.manual_seed(5)
    with fabric.init_module(empty_init=True):  # Fabric's: on the meta device, reset_parameters() once parallelized
        net = Net()
    model = fabric.setup_module(net)
    optimizer = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
    for _ in range(3):
        fabric.backward(model(torch.randn(4, 8)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    whole = {k: v.full_tensor().detach() for k, v in model.state_dict().items()}
    return meshes, whole


if __name__ == "__main__":
    main()
