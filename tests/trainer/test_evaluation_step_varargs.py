"""``validation_step(self, *args)`` with several validation loaders is called with ``dataloader_idx`` last,
as Lightning 2.6 calls it (reduced from Lightning's own
tests/tests_pytorch/trainer/logging_/test_logger_connector.py::test_auto_add_dataloader_idx).

Before: trainmesh passed ``(batch, batch_idx)`` to a step that takes ``*args`` (it counted named parameters
only), so a step reading ``args[-1]`` as the loader's index read the batch index, and one passing
``args[:-1]`` on stopped with "missing 1 required positional argument: 'batch_idx'"."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import run_both, trainer_kwargs

pytest.importorskip("lightning.pytorch")


def step_with_varargs(L, root):
    class Model(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(3, 1)
            self.calls = []

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.net(batch[0]), batch[1])

        def validation_step(self, *args):
            self.calls.append(args[1:])
            loss = F.mse_loss(self.net(args[0][0]), args[0][1])
            self.log(f"val_loss_{args[-1]}", loss, add_dataloader_idx=False)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.randn(8, 3, generator=torch.Generator().manual_seed(0)), torch.randn(8, 1))
    model = Model()
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=1, logger=False, enable_checkpointing=False))
    trainer.fit(model, DataLoader(data, batch_size=4), [DataLoader(data, batch_size=4), DataLoader(data, batch_size=8)])
    return model.calls, {k: v.item() for k, v in trainer.callback_metrics.items()}


def test_a_step_taking_args_gets_the_dataloader_idx(tmp_path):
    found = run_both(step_with_varargs, tmp_path)
    assert found["lightning"][0][-1] == (0, 1)  # the second loader's only batch: batch_idx 0, dataloader_idx 1
    assert found["trainmesh"] == found["lightning"]
