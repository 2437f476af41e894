"""``trainmesh.demos.mnist_datamodule`` against Lightning 2.6's ``lightning.pytorch.demos.mnist_datamodule``
(Lightning's GAN example imports its ``MNISTDataModule``; the port stopped at the import before).

Both read the same hosted-format files (``PL_USE_MOCKED_MNIST=1``, files written here, nothing
downloaded) and are compared as data: the splits, every batch of the three loaders, and the
weights a small model trains to on each framework's Trainer.
"""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.programs import port, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _hosted_files(data_dir) -> None:
    """Lightning's hosted layout: <data_dir>/MNIST/complete/{training,test}.pt, (uint8 images, labels)."""
    folder = data_dir / "MNIST" / "complete"
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for name, n in (("training.pt", 40), ("test.pt", 16)):
        torch.save(
            (
                torch.randint(0, 256, (n, 28, 28), generator=g, dtype=torch.uint8),
                torch.randint(0, 10, (n,), generator=g),
            ),
            folder / name,
        )


def _data_module(name: str, data_dir):
    if name == "lightning":
        from lightning.pytorch.demos.mnist_datamodule import MNISTDataModule
    else:
        from trainmesh.demos.mnist_datamodule import MNISTDataModule
    return MNISTDataModule(data_dir=str(data_dir), val_split=8, num_workers=0, batch_size=8)


def _read(name: str, data_dir) -> dict:
    dm = _data_module(name, data_dir)
    dm.prepare_data()
    dm.setup("fit")
    torch.manual_seed(3)  # the training loader shuffles from the global generator
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory without an accelerator
        loaders = {"train": dm.train_dataloader(), "val": dm.val_dataloader(), "test": dm.test_dataloader()}
        batches = {k: [(x.clone(), y.clone()) for x, y in loader] for k, loader in loaders.items()}
    return {"name": dm.name, "classes": dm.num_classes, "split": list(dm.dataset_val.indices), "batches": batches}


def test_the_data_module_splits_and_loads_as_lightning_s(tmp_path, monkeypatch):
    monkeypatch.setenv("PL_USE_MOCKED_MNIST", "1")
    _hosted_files(tmp_path / "data")
    theirs, ours = (_read(name, tmp_path / "data") for name in ("lightning", "trainmesh"))
    assert (ours["name"], ours["classes"], ours["split"]) == (theirs["name"], theirs["classes"], theirs["split"])
    assert {k: len(v) for k, v in ours["batches"].items()} == {"train": 4, "val": 1, "test": 2}
    for stage, batches in theirs["batches"].items():
        for (x, y), (a, b) in zip(batches, ours["batches"][stage]):
            assert torch.equal(x, a) and torch.equal(y, b), stage


def test_without_torchvision_or_the_mocked_copy_both_stop_at_prepare_data(tmp_path, monkeypatch):
    monkeypatch.delenv("PL_USE_MOCKED_MNIST", raising=False)
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed: both would download")
    for name in ("lightning", "trainmesh"):
        with pytest.raises(ModuleNotFoundError, match="torchvision"):
            _data_module(name, tmp_path / "data").prepare_data()


def _fit(L, root):
    class Classifier(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(28 * 28, 10)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self.net(x.flatten(1)), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Classifier()
    name = "lightning" if L.pl.__name__.startswith("lightning") else "trainmesh"
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=2, logger=False, enable_checkpointing=False))
    trainer.fit(model, _data_module(name, root.parent / "data"))
    return float(trainer.callback_metrics["train_loss"]), {k: v.clone() for k, v in model.state_dict().items()}


def test_a_module_trains_on_it_as_under_lightning(tmp_path, monkeypatch):
    monkeypatch.setenv("PL_USE_MOCKED_MNIST", "1")
    _hosted_files(tmp_path / "data")
    found = {}
    for name in ("lightning", "trainmesh"):
        L = port(name)
        L.pl.seed_everything(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found[name] = _fit(L, tmp_path / name)
    (loss, weights), (our_loss, our_weights) = found["lightning"], found["trainmesh"]
    assert our_loss == loss
    assert all(torch.equal(weights[k], our_weights[k]) for k in weights)
