"""Found by the UvA normalizing-flows tutorial (a forward that draws torch.rand, with
``example_input_array``): Lightning 2.6's ModelSummary runs the example through the model at the
start of fit, which moves the RNG; trainmesh did not, so the trained weights differed."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.programs import differences, run_both, trainer_kwargs


def noisy_forward(L, root):
    class Noisy(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.example_input_array = torch.zeros(2, 4)

        def forward(self, x):
            return self.layer(x + torch.rand_like(x))

        def training_step(self, batch, batch_idx):
            return self(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Noisy()
    loader = DataLoader(TensorDataset(torch.ones(8, 4)), batch_size=4)
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=1, logger=False, enable_checkpointing=False))
    trainer.fit(model, loader)
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_summary_runs_the_example_input_as_lightning_s(tmp_path):
    pytest.importorskip("lightning.pytorch")
    found = run_both(noisy_forward, tmp_path)
    assert differences(found["lightning"], found["trainmesh"]) == []


def example_read_by_a_property(L, root):
    # Found by repalette's PreTrainSystem (l-progs6 p02): ``example_input_array`` as a property returning
    # ``next(iter(self.val_dataloader()))``; each read draws a loader iterator's seed from the global
    # generator. Lightning (1.9.5 and 2.6) reads it three times at fit's start, the third when it picks the
    # size columns; trainmesh read it twice, so the shuffled order and the weights differed.
    reads = []

    class FromTheLoader(L.pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        @property
        def example_input_array(self):
            reads.append(torch.rand(1).item())
            return torch.zeros(1, 4)

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, batch_idx):
            return self(batch[0]).pow(2).mean() * (batch_idx + 1)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = FromTheLoader()
    loader = DataLoader(TensorDataset(torch.arange(32.0).view(8, 4)), batch_size=2, shuffle=True)
    trainer = L.pl.Trainer(**trainer_kwargs(root, max_epochs=1, logger=False, enable_checkpointing=False))
    trainer.fit(model, loader)
    return {"reads": reads, "weights": {k: v.clone() for k, v in model.state_dict().items()}}


def test_summary_reads_the_example_input_as_often_as_lightning_s(tmp_path):
    pytest.importorskip("lightning.pytorch")
    found = run_both(example_read_by_a_property, tmp_path)
    assert len(found["trainmesh"]["reads"]) == 3
    assert differences(found["lightning"], found["trainmesh"]) == []
