"""prepare_data on the Module as on the DataModule: the DataModule's, then the Module's, each only
where overridden, before any setup (Lightning's order); per machine or, with
prepare_data_per_node=False, once in all (two processes: test_data_hooks_ddp.py)."""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer

calls = []


def data():
    x = torch.ones(4, 2)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=2)


class Data(tm.DataModule):
    def prepare_data(self):
        calls.append("datamodule.prepare_data")

    def setup(self, stage):
        calls.append(f"datamodule.setup:{stage.value}")

    def train_dataloader(self):
        return data()


class Net(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def prepare_data(self):
        calls.append(f"module.prepare_data:{self.trainer.stage}")

    def setup(self, stage):
        calls.append(f"module.setup:{stage.value}")

    def training_step(self, batch, batch_idx):
        return F.mse_loss(self.layer(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_the_modules_prepare_data_runs_after_the_data_modules_before_setup():
    calls.clear()
    quiet_trainer(max_epochs=1).fit(Net(), datamodule=Data())
    # Lightning 2.6.6 on the same program.
    assert calls == [
        "datamodule.prepare_data",
        "module.prepare_data:fit",
        "datamodule.setup:fit",
        "module.setup:fit",
    ]


def test_prepare_data_once_in_all_still_runs_in_a_single_process_and_with_loaders():
    calls.clear()
    module = Net()
    module.prepare_data_per_node = False  # global rank 0: this process
    quiet_trainer(max_epochs=1).fit(module, data())
    assert calls == ["module.prepare_data:fit", "module.setup:fit"]


def test_prepare_data_defaults_do_nothing():
    assert tm.Module.prepare_data_per_node and tm.DataModule.prepare_data_per_node
    assert tm.Module().prepare_data() is None and tm.DataModule().prepare_data() is None
