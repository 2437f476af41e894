"""The batch-size search asks for train loaders as Lightning 2.6's does: ``train_dataloader()`` once
before the first trial (at the model's own size: Lightning's first trial reads it), once after each
size change, once as the search ends; the same batches read and the generator left in the same state,
with the batch size on the module, in its ``hparams`` or on a data module."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from helpers.models import quiet_trainer


class _Reads(Dataset):
    """64 rows; records each index read."""

    def __init__(self, reads: list[int]) -> None:
        self.reads, self.x = reads, torch.arange(64.0).unsqueeze(1)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> torch.Tensor:
        self.reads.append(index)
        return self.x[index]


def _search(framework, tmp_path, where: str, **arguments) -> dict:
    record: dict = {"loaders": [], "reads": []}

    def loader(owner) -> DataLoader:
        size = owner.batch_size if hasattr(owner, "batch_size") else owner.hparams.batch_size
        record["loaders"].append((size, torch.rand(1).item()))  # a loader method that draws
        return DataLoader(_Reads(record["reads"]), batch_size=size, shuffle=True)

    class Data(framework.LightningDataModule):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 8

        def train_dataloader(self) -> DataLoader:
            return loader(self)

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            if where == "hparams":
                self.save_hyperparameters({"batch_size": 8})
            elif where == "module":
                self.batch_size = 8
            self.layer = torch.nn.Linear(1, 1)

        def train_dataloader(self) -> DataLoader:
            return loader(self)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    trainer = quiet_trainer(
        framework=framework,
        max_epochs=1,
        default_root_dir=tmp_path,
    )
    torch.manual_seed(0)
    datamodule = Data() if where == "datamodule" else None
    record["found"] = framework.tuner.Tuner(trainer).scale_batch_size(Model(), datamodule=datamodule, **arguments)
    record["generator"] = torch.get_rng_state()
    return record


@pytest.mark.parametrize(
    ("where", "arguments"),
    [
        ("module", {"mode": "power", "steps_per_trial": 2, "max_trials": 3}),
        ("hparams", {"mode": "binsearch", "steps_per_trial": 1, "init_val": 4, "max_trials": 4}),
        ("datamodule", {"mode": "power", "steps_per_trial": 1, "init_val": 3, "max_trials": 25}),
    ],
)
def test_loaders_asked_batches_read_and_generator_are_lightning_s(tmp_path, where, arguments) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on loader workers
        expected = _search(lightning, tmp_path / "lightning", where, **arguments)
        got = _search(trainmesh, tmp_path / "trainmesh", where, **arguments)
    assert got["found"] == expected["found"]
    assert got["loaders"] == expected["loaders"]
    assert got["reads"] == expected["reads"]
    assert torch.equal(got["generator"], expected["generator"])
