"""A Lightning Fabric program on 2 CPU processes (``strategy="ddp"``, ``launch()``):
``python fabric_ddp_run.py lightning|trainmesh OUT``.

Each process trains with gradient accumulation (``no_backward_sync``), clips by value, logs the
mean loss into Fabric's CSVLogger, calls a callback's hook, runs a method marked as a forward
through the strategy's wrapper, gathers, broadcasts, reduces in place, saves and loads a checkpoint, and writes its
record to ``OUT/rank<r>.pt``: the sample indices it read, the weights, the collectives' results.
"""

from __future__ import annotations

import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

if sys.argv[1] == "lightning":
    from lightning.fabric import Fabric
    from lightning.fabric.loggers import CSVLogger
else:
    from trainmesh import Fabric
    from trainmesh.fabric.loggers import CSVLogger

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
    # Fabric's all_reduce is in place: published loops ignore its return value (an int's mean is truncated)
    summed, counts = torch.tensor([1.0 + fabric.global_rank, 4.0]), torch.tensor([3 * (fabric.global_rank + 1)])
    returned = fabric.all_reduce(summed, reduce_op="sum")
    fabric.all_reduce(counts)
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
        "in_place": (summed.tolist(), returned is summed, counts.tolist(), counts.dtype),
        "first": first,
        "step": state["step"],
        "calls": recorder.calls,
        "ranks": (fabric.global_rank, fabric.local_rank, fabric.world_size, fabric.is_global_zero),
    }
    torch.save(record, os.path.join(OUT, f"rank{fabric.global_rank}.pt"))


if __name__ == "__main__":
    main()
