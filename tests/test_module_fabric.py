"""A LightningModule set up by trainmesh.Fabric beside one set up by Lightning Fabric 2.6, on one process.

Fabric's ``setup`` hands the module the Fabric: ``self.log``/``self.log_dict`` then go to
``fabric.log_dict`` (one row per call), ``self.trainer`` reads the Fabric, ``self.optimizers()`` returns
Fabric's optimizers and ``manual_backward`` calls ``fabric.backward``. The same module code (a loop calling
its ``training_step``, as published Fabric programs do) writes the same ``metrics.csv`` and trains to the
same weights under each; what it reads back, Fabric's check of a logged value and ``self.print``'s error
(Lightning's reads ``self.trainer.progress_bar_callback``, which Fabric's shim does not have) answer the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning.fabric")


def _classes(framework: str) -> tuple[type, type, type]:
    if framework == "lightning":
        from lightning.fabric import Fabric
        from lightning.fabric.loggers import CSVLogger
        from lightning.pytorch import LightningModule
    else:
        from trainmesh import Fabric, LightningModule
        from trainmesh.fabric.loggers import CSVLogger
    return Fabric, CSVLogger, LightningModule


def _run(framework: str, root: Path) -> dict:
    Fabric, CSVLogger, LightningModule = _classes(framework)

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)
            self.seen: list = []

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch).pow(2).mean()
            self.log("train_loss", loss, prog_bar=True)
            self.log_dict({"a": batch_idx, "b": loss * 2})
            self.log("hidden", 1.0, logger=False)  # Fabric's: nothing logged
            self.seen.append((self.trainer.world_size, type(self.optimizers()).__name__, type(self.logger).__name__))
            return loss

    fabric = Fabric(accelerator="cpu", devices=1, loggers=CSVLogger(root, flush_logs_every_n_steps=1))
    fabric.seed_everything(5, verbose=False)
    model = Model()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for batch_idx in range(3):
        loss = model.training_step(torch.randn(3, 4), batch_idx)
        model.manual_backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    with pytest.raises(ValueError) as error:
        model.log("bad", "text")
    with pytest.raises(AttributeError) as printed:  # Lightning's self.print reads the shim's progress bar
        model.print("on rank 0")
    with pytest.raises(AttributeError) as untoggled:  # Lightning's reads self.trainer.optimizers, as toggle's
        model.untoggle_optimizer(optimizer)
    fabric.logger.finalize("success")
    return {
        "csv": (root / "lightning_logs" / "version_0" / "metrics.csv").read_text(),
        "weights": [p.detach().clone() for p in model.parameters()],
        "seen": model.seen,
        "fabric": model.module.fabric is fabric,
        "error": str(error.value),
        "printed": str(printed.value),
        "untoggled": str(untoggled.value),
    }


def test_a_lightning_module_logs_and_trains_through_fabric_as_lightning(tmp_path):
    ours, theirs = _run("trainmesh", tmp_path / "tm"), _run("lightning", tmp_path / "pl")
    assert ours["csv"] == theirs["csv"]
    assert all(torch.equal(a, b) for a, b in zip(ours["weights"], theirs["weights"]))
    assert ours["seen"] == theirs["seen"] == [(1, "FabricSGD", "CSVLogger")] * 3
    assert ours["fabric"] and theirs["fabric"]
    assert ours["error"] == theirs["error"]
    assert ours["printed"] == theirs["printed"]
    assert ours["untoggled"] == theirs["untoggled"]
