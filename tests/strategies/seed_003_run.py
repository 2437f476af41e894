"""Seed 003's model, trained the seed's two model-parallel ways (test_seed_003.py).

python seed_003_run.py LEG OUT [val=0|val=1|val=0,1]
  LEG single             one process, one device: the reference (global batch 16)
  LEG layers_on_devices  (a) one process, the model's halves on devices 0 and 1
                         (Trainer(devices=2, strategy="layers_on_devices"); ACCELERATOR=cpu|gpu)
  LEG pp_replicate       (b) under torchrun, 2 nodes x 2 processes: each node's two processes hold
                         one pipeline (seq1 | seq2), the nodes are replicas (per-rank batch 8)
  val=0                  fit without the validation loader (default: validate after each epoch)
  val=0,1                both, one after the other in the same processes (one launch, one process
                         group: starting two torchrun nodes was most of a pp_replicate leg's cost)
Rank 0 writes OUT (torch.save): the whole model's weights, callback_metrics, the step count.
Under pp_replicate every rank also writes OUT.rank<R>: the whole model's weights as that rank
gathers them, and where it sits (node, mesh coordinates, its pipeline group's and replica
group's ranks, the parameters it holds). With several val= values, each fit's files are
OUT-val<V> and OUT-val<V>.rank<R>.

The seed's model is ``Linear(10, 10)`` on cuda:0 then ``Linear(10, 5)`` on cuda:1, with the
``.to()`` calls in its constructor and forward. Here the same layers are two nn.Sequential
halves and the module holds no device at all: the strategy places the halves. Under the
pipeline a rank's other half is an empty nn.Sequential, which passes its input through, so
the same ``forward`` serves every stage.
"""

import faulthandler
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm

GLOBAL_BATCH = 16
EPOCHS = 2
REPLICAS = 2  # pp_replicate: the number of nodes; each replica reads GLOBAL_BATCH // REPLICAS per step


def dataset(n: int = 64, seed: int = 0) -> TensorDataset:
    """Seed 003's shapes: 10 features in, 5 out (a fixed linear map plus noise, to fit)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    w = torch.randn(10, 5, generator=torch.Generator().manual_seed(123))
    return TensorDataset(x, x @ w + 0.1 * torch.randn(n, 5, generator=g))


class Net(tm.Module):
    """Seed 003's Net: sub_net1 = Linear(10, 10), sub_net2 = Linear(10, 5), without the devices."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)  # every process builds the same initial weights
        self.seq1 = nn.Sequential(nn.Linear(10, 10))
        self.seq2 = nn.Sequential(nn.Linear(10, 5))

    def forward(self, x):
        return self.seq2(self.seq1(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def loaders(per_rank_batch: int) -> tuple[DataLoader, DataLoader]:
    # 64 training samples: 4 global batches of 16 per epoch. 32 validation samples: every
    # evaluation batch full in every layout, so a mean of batch means is the mean over samples.
    return (
        DataLoader(dataset(), batch_size=per_rank_batch),
        DataLoader(dataset(32, seed=1), batch_size=per_rank_batch),
    )


def fit(
    accelerator: str = "cpu",
    devices: int = 1,
    strategy="single",
    num_nodes: int = 1,
    per_rank_batch: int = GLOBAL_BATCH,
    model: Net | None = None,
    validate: bool = True,
    as_replicas: int = 1,
) -> tuple[tm.Trainer, Net]:
    """``as_replicas``: one process reading, at each step, the batches the Trainer's shuffling
    sampler (seed 0) deals that many data-parallel replicas together (pp_replicate's reference)."""
    model = model or Net()
    trainer = tm.Trainer(
        accelerator=accelerator,
        devices=devices,
        num_nodes=num_nodes,
        strategy=strategy,
        max_epochs=EPOCHS,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    train, val = loaders(per_rank_batch)
    if as_replicas > 1:
        from helpers.lightning_order import GlobalBatches  # the test's process: tests/ is on its path

        order = GlobalBatches(len(train.dataset), world=as_replicas, batch_size=per_rank_batch // as_replicas)
        train = DataLoader(train.dataset, batch_size=per_rank_batch, sampler=order)
    trainer.fit(model, train, val if validate else None)
    return trainer, model


def whole_weights(trainer: tm.Trainer) -> dict[str, torch.Tensor]:
    """The whole model's weights on every rank (a collective under a pipeline)."""
    full = trainer.runtime.state_dicts(trainer.model, [], sharded=False)["model"]
    return {k: v.detach().cpu().clone() for k, v in full.items()}


def where_this_rank_sits(trainer: tm.Trainer) -> dict:
    import torch.distributed as dist

    runtime, mesh = trainer.runtime, trainer.runtime.mesh
    return {
        "global_rank": runtime.global_rank,
        "local_rank": runtime.local_rank,
        "node_rank": runtime.node_rank,
        "env_group_rank": int(os.environ["GROUP_RANK"]),  # what torchrun --node-rank set
        "pp": mesh.rank("pp"),
        "dp_replicate": mesh.rank("dp_replicate"),
        "dp_rank": mesh.dp_rank,
        "pp_group": dist.get_process_group_ranks(mesh.group("pp")),
        "replica_group": dist.get_process_group_ranks(mesh.group("dp_replicate")),
        "parameters": [name for name, _ in trainer.model.named_parameters()],
        "dims": {axis: mesh.group_size(axis) for axis in ("pp", "dp_replicate", "dp_shard", "tp")},
        "strategy": type(trainer.strategy).__name__,
    }


def single(validate: bool) -> tm.Trainer:
    """One process, one device: the reference."""
    return fit(validate=validate)[0]


def layers_on_devices(validate: bool) -> tm.Trainer:
    """(a) one process, the model's halves on devices 0 and 1."""
    return fit(
        accelerator=os.environ.get("ACCELERATOR", "cpu"), devices=2, strategy="layers_on_devices", validate=validate
    )[0]


def pp_replicate(validate: bool) -> tm.Trainer:
    """(b) under torchrun, 2 nodes x 2 processes: a pipeline per node, the nodes replicas."""
    return fit(
        devices=2,
        num_nodes=REPLICAS,
        strategy="pp_replicate",
        per_rank_batch=GLOBAL_BATCH // REPLICAS,
        validate=validate,
    )[0]


# The programs of this file (LEG on the command line); each returns the Trainer it fitted.
PROGRAMS = {"single": single, "layers_on_devices": layers_on_devices, "pp_replicate": pp_replicate}


def main() -> None:
    faulthandler.dump_traceback_later(int(os.environ.get("RUN_TIMEOUT", "240")), exit=True)
    leg, out = sys.argv[1], sys.argv[2]
    values = dict(arg.split("=", 1) for arg in sys.argv[3:]).get("val", "1").split(",")
    if leg not in PROGRAMS:
        raise SystemExit(f"unknown leg {leg!r}")
    for value in values:  # the second fit uses the process group the first one made
        save(leg, PROGRAMS[leg](value == "1"), out if len(values) == 1 else f"{out}-val{value}")


def save(leg: str, trainer: tm.Trainer, out: str) -> None:
    weights = whole_weights(trainer)
    if leg == "pp_replicate":
        torch.save(
            {"state_dict": weights, "place": where_this_rank_sits(trainer), "metrics": dict(trainer.callback_metrics)},
            f"{out}.rank{trainer.global_rank}",
        )
    if trainer.is_global_zero:
        torch.save(
            {"state_dict": weights, "metrics": dict(trainer.callback_metrics), "steps": trainer.global_step}, out
        )


if __name__ == "__main__":
    main()
