"""Lightning's form of ``ModelParallelStrategy`` (``data_parallel_size=``, ``tensor_parallel_size=``: the
module's ``configure_model`` parallelizes on ``self.device_mesh``) at 2 CPU processes:
``python lightning_model_parallel_run.py lightning|trainmesh OUT``.

One launch runs every case of ``CASES`` in order (Lightning's strategy starts the script again as the
second process) and writes each process's record to ``OUT/<case>-rank<r>.pt``: the whole trained
weights, the logged metrics, the mesh's names and sizes as ``configure_model`` saw them, and the
checkpoint files written. ``tensor_parallel`` builds its model in ``trainer.init_module(empty_init=True)``
(on the meta device, as Lightning's strategy does). ``resumed`` fits 1 epoch saving one whole-state file
(``save_distributed_checkpoint=False``), then 2 epochs from it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils.data import DataLoader, TensorDataset

if sys.argv[1] == "lightning":
    import lightning.pytorch as pl
    from lightning.pytorch.strategies import ModelParallelStrategy
else:
    import trainmesh as pl
    from trainmesh.strategies import ModelParallelStrategy

_gen = torch.Generator().manual_seed(0)
X, Y = torch.randn(48, 8, generator=_gen), torch.randn(48, 4, generator=_gen)


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.mesh_seen = None

    def configure_model(self):
        mesh = self.device_mesh
        self.mesh_seen = (mesh.mesh_dim_names, tuple(mesh.shape))
        if mesh["tensor_parallel"].size() > 1:
            parallelize_module(self.net, mesh["tensor_parallel"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        if mesh["data_parallel"].size() > 1:
            fully_shard(self.net, mesh=mesh["data_parallel"])

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


CASES = {
    "tensor_parallel": dict(sizes=(1, 2), empty_init=True),
    "data_parallel": dict(sizes=(2, 1)),
    "resumed": dict(sizes=(1, 2), distributed_checkpoint=False),
}


def fit(out: Path, sizes, epochs: int, ckpt_path=None, distributed_checkpoint: bool = True, empty_init=False):
    torch.manual_seed(3)
    strategy = ModelParallelStrategy(
        data_parallel_size=sizes[0], tensor_parallel_size=sizes[1], save_distributed_checkpoint=distributed_checkpoint
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[pl.callbacks.ModelCheckpoint(out, filename="{epoch}", save_top_k=-1)],
        num_sanity_val_steps=0,
    )
    # empty_init: built on the meta device, each layer's reset_parameters once parallelized (Lightning's order)
    with trainer.init_module(empty_init=True) if empty_init else contextlib.nullcontext():
        model = Model()
    loaders = DataLoader(TensorDataset(X, Y), batch_size=8), DataLoader(TensorDataset(X, Y), batch_size=16)
    trainer.fit(model, *loaders, ckpt_path=ckpt_path)
    return model, trainer


def run(out: Path, case: str, sizes, distributed_checkpoint: bool = True, empty_init: bool = False) -> None:
    folder = out / case
    if case == "resumed":
        fit(folder, sizes, 1, distributed_checkpoint=False)
        model, trainer = fit(folder, sizes, 2, ckpt_path=folder / "epoch=0.ckpt", distributed_checkpoint=False)
    else:
        model, trainer = fit(folder, sizes, 2, distributed_checkpoint=distributed_checkpoint, empty_init=empty_init)
    # Whole tensors (DTensors: full_tensor is a collective, which every rank runs)
    weights = {k: getattr(v, "full_tensor", v.detach)().clone() for k, v in model.net.state_dict().items()}
    metrics = {k: v.item() for k, v in trainer.callback_metrics.items()}
    files = sorted(os.listdir(folder)) if folder.exists() else []
    kinds = {name: os.path.isdir(folder / name) for name in files}
    record = dict(weights=weights, metrics=metrics, mesh=model.mesh_seen, files=kinds)
    if not distributed_checkpoint:  # one file: its weights whole, as Lightning writes them
        saved = torch.load(folder / "epoch=1.ckpt", weights_only=False)
        record["saved"] = {k: (type(v).__name__, v.clone()) for k, v in saved["state_dict"].items()}
    torch.save(record, out / f"{case}-rank{trainer.global_rank}.pt")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for case, settings in CASES.items():
        run(out, case, **settings)


if __name__ == "__main__":
    main(Path(sys.argv[2]))
