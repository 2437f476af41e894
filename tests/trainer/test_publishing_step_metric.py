"""A metric logged as ``"step"`` is the loggers' step, as Lightning's ``LoggerConnector.log_metrics`` takes it.

Found in a 1.x program (l-progs4 p01, a dense classifier): ``log_dict({"train_acc": ..., "step":
self.current_epoch + 1.0}, on_epoch=True)`` "for x-axis change". Lightning (2.6, and 1.9.5) pops
``step`` out of the row and writes the row at that step, without the ``epoch`` column; trainmesh wrote
it as a column and the rows at its own step with the epoch.
"""

from __future__ import annotations

import csv

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning.pytorch")


def _rows(framework: str, root) -> list[dict[str, str]]:
    if framework == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch.loggers import CSVLogger

        base = pl.LightningModule
    else:
        import trainmesh as pl
        from trainmesh.loggers import CSVLogger

        base = pl.Module

    class Net(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log_dict({"loss": loss, "step": self.current_epoch + 1.0}, on_step=False, on_epoch=True)
            self.log("every", loss)  # a step row without "step": Lightning's own step and epoch
            return loss

        def validation_step(self, batch, batch_idx):
            self.log_dict({"val": self.layer(batch[0]).mean(), "step": self.current_epoch + 1.0})

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2)
    trainer = pl.Trainer(
        max_epochs=2,
        logger=CSVLogger(str(root)),
        log_every_n_steps=2,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(Net(), loader, loader)
    with open(f"{trainer.logger.log_dir}/metrics.csv") as f:
        return list(csv.DictReader(f))


def test_a_metric_logged_as_step_is_the_loggers_step(tmp_path):
    theirs = _rows("lightning", tmp_path / "lightning")
    ours = _rows("trainmesh", tmp_path / "trainmesh")
    assert {k: v for row in ours for k, v in row.items() if v} and ours == theirs
