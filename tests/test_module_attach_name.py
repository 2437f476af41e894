"""A Lightning module's own method named ``attach`` is the program's: Lightning's LightningModule has no such
public method, and its Trainer never calls it. Before, trainmesh's Module had a public ``attach(trainer,
log_collector)`` the Trainer called, so a module defining ``attach`` had its method called with the Trainer
(and trainmesh's own never ran); Lightning's models/test_hooks.py recorded it as an extra hook call."""

import importlib
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}


def _fit(name):
    framework = FRAMEWORKS[name]
    torch.manual_seed(0)

    class WithHead(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)
            self.attached = []

        def attach(self, head):  # the program's own: puts a head on the body
            self.attached.append(type(head).__name__)
            self.head = head

        def training_step(self, batch, batch_idx):
            self.log("loss", self.head(self.layer(batch[0])).pow(2).mean())
            return self.head(self.layer(batch[0])).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    module = WithHead()
    module.attach(torch.nn.Linear(2, 1))
    trainer = framework.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
    return module.attached, float(trainer.callback_metrics["loss"]), module.head.weight.detach().clone()


def test_a_module_s_own_attach_is_not_called_by_the_trainer():
    attached, loss, weight = _fit("lightning")
    assert attached == ["Linear"]
    t_attached, t_loss, t_weight = _fit("trainmesh")
    assert (t_attached, t_loss) == (attached, loss)
    torch.testing.assert_close(t_weight, weight)
