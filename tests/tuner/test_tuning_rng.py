"""The global random generator after the Tuner's searches, as Lightning 2.6 leaves it: ``lr_find``
runs under ``isolate_rng`` (no draw), and ``scale_batch_size`` makes one more train-loader iterator as
its search ends (its ``__scale_batch_restore_params`` resets the fit loop's data). A fit after the
search shuffles with that generator, so any difference changes every later number."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.models import quiet_trainer


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
        return quiet_trainer(
            framework=framework,
            max_epochs=1,
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


def _lr_search_loaders(framework, tmp_path, *, callback: bool) -> dict:
    """The loaders ``lr_find`` asks for (each drawing a number), the rows read and the generator after:
    the Tuner's search alone, or a fit with the ``LearningRateFinder``."""
    record: dict = {"loaders": [], "reads": []}

    class Rows(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 32

        def __getitem__(self, index: int) -> torch.Tensor:
            record["reads"].append(index)
            return torch.full((3,), float(index))

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)
            self.lr = 0.01

        def train_dataloader(self):
            record["loaders"].append(torch.rand(1).item())
            return DataLoader(Rows(), batch_size=4, shuffle=True)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean() * 1e-3

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    finder = framework.callbacks.LearningRateFinder(num_training_steps=4) if callback else None
    trainer = quiet_trainer(
        framework=framework,
        max_epochs=1,
        default_root_dir=tmp_path,
        callbacks=[finder] if finder else None,
    )
    torch.manual_seed(0)
    if callback:
        trainer.fit(Model())
    else:
        framework.tuner.Tuner(trainer).lr_find(Model(), num_training=4)
    record["generator"] = torch.get_rng_state()
    return record


@pytest.mark.parametrize("callback", [False, True])
def test_lr_find_asks_for_train_loaders_as_lightning(tmp_path, callback) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _lr_search_loaders(lightning, tmp_path / "lightning", callback=callback)
    got = _lr_search_loaders(trainmesh, tmp_path / "trainmesh", callback=callback)
    assert got["loaders"] == expected["loaders"]  # as many, each drawing the same number
    if not callback:
        assert got["reads"] == expected["reads"]
        assert torch.equal(got["generator"], expected["generator"])
    # With the callback, Lightning's fit reads the loader its search reset (the fit asks for no other) with
    # the iterator made then, under its isolate_rng; trainmesh's fit reads that loader too, but makes its
    # iterator in the fit, drawing the loader's base seed there: the fit's rows differ (documented).
