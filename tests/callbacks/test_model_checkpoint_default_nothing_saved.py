"""The Trainer's default checkpointing after a fit that saved nothing: a manual-optimization module that
steps its torch optimizer itself (``opt.optimizer.step()``, never through Lightning's), so ``global_step``
stays 0 and Lightning 2.6.6's default ModelCheckpoint writes no file. Before, trainmesh's default callback
wrote ``last.ckpt`` at the fit's end (the fallback meant for a program's ``save_last=True``)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh

pl = pytest.importorskip("lightning.pytorch")


def _files(package, root) -> tuple[int, list[str]]:
    class Net(package.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            optimizer = self.optimizers()
            self.manual_backward(self.layer(batch[0]).pow(2).mean())
            optimizer.optimizer.step()  # the torch optimizer's own step: no step counted
            optimizer.zero_grad()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.ones(6, 2)), batch_size=2)

    trainer = package.Trainer(
        max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=root
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Net())
    return trainer.global_step, sorted(str(path.relative_to(root)) for path in root.rglob("*.ckpt"))


def test_no_file_when_nothing_was_saved_as_lightning(tmp_path):
    expected = _files(pl, tmp_path / "lightning")
    assert expected == (0, [])
    assert _files(trainmesh, tmp_path / "trainmesh") == expected
