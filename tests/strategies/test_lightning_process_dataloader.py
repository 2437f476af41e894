"""A program's strategy subclass overriding Lightning's ``process_dataloader(dataloader)`` gets each
loader where Lightning 2.6 hands it over (the sanity check's validation loaders, the train loader, then
validate's, test's and predict's: once a setup), and its ``super()`` call works. Before, trainmesh called
it with its own keyword arguments (``train=``, ``seed=``: TypeError at the first loader; l-tests9's
strategies/test_single_device.py). Compared with Lightning's run of the same program."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from helpers.programs import port, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def _loaders_seen(name: str, root) -> list:
    L = port(name)
    strategies = __import__(f"{L.pl.__name__}.strategies", fromlist=["SingleDeviceStrategy"])
    seen: list = []

    class Strategy(strategies.SingleDeviceStrategy):
        def process_dataloader(self, dataloader):
            stage = str(self.lightning_module.trainer.state.stage.value)
            seen.append((stage, len(dataloader.dataset), dataloader.batch_size))
            return super().process_dataloader(dataloader)

    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean()

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("v", self.layer(batch).pow(2).mean())

        def test_step(self, batch, batch_idx):
            self.log("t", self.layer(batch).pow(2).mean())

        def predict_step(self, batch, batch_idx):
            return self.layer(batch)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def data(n):
        return DataLoader(torch.randn(n, 4), batch_size=2)

    settings = dict(max_epochs=2, limit_train_batches=2, num_sanity_val_steps=1, logger=False)
    kwargs = trainer_kwargs(root / name, enable_checkpointing=False, **settings)
    kwargs.pop("accelerator"), kwargs.pop("devices")
    trainer = L.pl.Trainer(strategy=Strategy(device="cpu"), **kwargs)
    model = Model()
    trainer.fit(model, data(8), [data(6), data(4)])
    trainer.validate(model, data(10))
    trainer.test(model, data(12))
    trainer.predict(model, data(14))
    return seen


def test_a_strategy_subclass_s_process_dataloader_gets_the_loaders_lightning_hands_it(tmp_path):
    theirs, ours = (_loaders_seen(name, tmp_path) for name in ("lightning", "trainmesh"))
    assert ours == theirs
    assert [size for _, size, _ in theirs] == [6, 4, 8, 10, 12, 14]
    # Lightning's predict loader reaches it rebuilt around its index-recording batch sampler (batch_size None):
    # an override rebuilding a loader from dataloader.batch_size predicts sample by sample (scout-l3 r5b:
    # 100 predictions where trainmesh gave 2 batches of 50, silently)
    assert theirs[-1] == ("predict", 14, None)
