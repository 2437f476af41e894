"""``trainmesh.demos.mnist_datamodule`` (``MNIST``, ``MNISTDataModule``, which Lightning's examples
import) against Lightning 2.6's: from the processed files on disk (``PL_USE_MOCKED_MNIST`` selects
Lightning's own reader where torchvision is not installed), the same splits, batches and weights."""

from __future__ import annotations

import importlib

import pytest
import torch

from helpers.programs import differences, outcome, run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def mnist_fit(L, root):
    mnist = importlib.import_module(L.pl.__name__ + ".demos.mnist_datamodule")
    data = mnist.MNISTDataModule(data_dir=str(root.parent / "data"), val_split=8, num_workers=0, batch_size=4)

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(28 * 28, 10)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.layer(x.flatten(1)), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self.layer(x.flatten(1)), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Model()
    logger = L.loggers.CSVLogger(root)
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=2, logger=logger, enable_checkpointing=False))
    trainer.fit(model, datamodule=data)
    dataset = mnist.MNIST(str(root.parent / "data"), train=False)
    return outcome(trainer, model, root), len(dataset), dataset[1][0].sum().item(), dataset[1][1]


def test_mnist_demo_data_trains_as_lightnings(tmp_path, monkeypatch):
    folder = tmp_path / "data" / "MNIST" / "complete"
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for name, n in (("training.pt", 24), ("test.pt", 6)):
        images = torch.randint(0, 256, (n, 28, 28), generator=g, dtype=torch.uint8)
        torch.save((images, torch.randint(0, 10, (n,), generator=g)), folder / name)
    monkeypatch.setenv("PL_USE_MOCKED_MNIST", "1")
    found = run_both(mnist_fit, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []
    assert found["trainmesh"][0]["global_step"] == 8  # 16 training images at batch 4, 2 epochs
