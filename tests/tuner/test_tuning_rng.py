"""The global random generator after the Tuner's searches, as Lightning 2.6 leaves it: ``lr_find``
runs under ``isolate_rng`` (no draw), and ``scale_batch_size`` makes one more train-loader iterator as
its search ends (its ``__scale_batch_restore_params`` resets the fit loop's data). A fit after the
search shuffles with that generator, so any difference changes every later number."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _draws(framework, tmp_path) -> list[float]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)
            self.lr, self.batch_size = 0.01, 4
            self.data = TensorDataset(torch.randn(64, 3))  # made once: the loaders asked for draw nothing

        def train_dataloader(self):
            return DataLoader(self.data, batch_size=self.batch_size, shuffle=True)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    def trainer():
        return framework.Trainer(
            max_epochs=1,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=tmp_path,
        )

    torch.manual_seed(0)
    draws = []
    framework.tuner.Tuner(trainer()).lr_find(Model(), num_training=5)
    draws.append(torch.rand(1).item())
    framework.tuner.Tuner(trainer()).scale_batch_size(Model(), mode="binsearch", max_trials=3, steps_per_trial=1)
    draws.append(torch.rand(1).item())
    return draws


def test_the_generator_after_lr_find_and_scale_batch_size_is_lightning_s(tmp_path) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _draws(lightning, tmp_path / "lightning")
    assert _draws(trainmesh, tmp_path / "trainmesh") == expected
