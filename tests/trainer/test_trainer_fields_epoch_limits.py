"""``trainer.max_epochs`` / ``min_epochs`` (and ``trainer.fit_loop``'s) read as Lightning 2.6 reads them: as given
(None where not) until a fit settles them (its ``_parse_loop_limits``: 1000 or -1 for max_epochs, 0 or 1 for
min_epochs), then the settled values. Before, trainmesh read 1000 / -1 from the Trainer's construction and
``trainer.min_epochs`` stayed None after a fit (Lightning's own
trainer/test_trainer.py::test_trainer_max_steps_and_epochs_fit_loop_done)."""

import importlib
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}
SETTINGS = [
    {},
    {"max_steps": 0},
    {"max_steps": 3},
    {"max_epochs": 2, "min_steps": 1},
    {"min_epochs": 2, "max_steps": 4},
    {"max_epochs": 1, "min_epochs": 1},
    {"fast_dev_run": True},
]


def _limits(trainer):
    return (trainer.max_epochs, trainer.min_epochs, trainer.fit_loop.max_epochs, trainer.fit_loop.min_epochs)


def _read(name, settings):
    framework = FRAMEWORKS[name]

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            self.trainer.should_stop = True  # a fit of 1000 epochs would be slow: stopped where min_* allow
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            self.seen_in_configure = _limits(self.trainer)
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = framework.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False, **settings
    )
    before = _limits(trainer)
    module = Net()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, DataLoader(TensorDataset(torch.randn(2, 2)), batch_size=1))
    return before, getattr(module, "seen_in_configure", None), _limits(trainer), trainer.global_step


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "none")
def test_epoch_limits_read_as_lightning(settings):
    assert _read("trainmesh", settings) == _read("lightning", settings)
