"""``trainer.optimizers = [...]`` / ``trainer.strategy.optimizers = [...]`` during a fit, as Lightning 2.6's
setter takes it: plain optimizers, the run's own kept as they are stepped, a new one stepped from then on.
Before, trainmesh stored the plain optimizer where its loop keeps its wrappers and stopped at the next batch
with "'AdamW' object has no attribute 'optimizer'" (acorn's EdgeClassifierStage, stored file 4695678581,
sets ``self.trainer.strategy.optimizers = [self.trainer.lr_scheduler_configs[0].scheduler.optimizer]`` at
each epoch's start)."""

import importlib
import warnings

import pytest
import torch
from torch.utils.data import DataLoader

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}


def _fit(name):
    framework = FRAMEWORKS[name]

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean()

        def on_train_epoch_start(self):
            if self.current_epoch == 0:  # the scheduler's own optimizer, set back (acorn)
                self.trainer.strategy.optimizers = [self.trainer.lr_scheduler_configs[0].scheduler.optimizer]
            else:  # a new optimizer from the second epoch on
                self.trainer.optimizers = [torch.optim.SGD(self.parameters(), lr=0.5)]

        def configure_optimizers(self):
            optimizer = torch.optim.AdamW(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    torch.manual_seed(0)
    net = Net()
    loader = DataLoader(torch.randn(6, 2), batch_size=3)
    trainer = framework.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(net, loader)
    return net.layer.weight.tolist(), [type(o).__name__ for o in trainer.optimizers], trainer.global_step


def test_optimizers_set_during_fit_are_stepped_as_lightning_steps_them():
    lightning, trainmesh = _fit("lightning"), _fit("trainmesh")
    assert lightning[1:] == (["SGD"], 4)
    assert trainmesh == lightning
