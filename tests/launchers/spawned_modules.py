"""The modules of test_spawn_outcome.py and test_spawn_evaluation.py that ddp_spawn sends to its
workers, in a file that does not import Lightning.

A spawned worker is a new interpreter that imports the module defining its model's class: from
the test files, whose Lightning twins need ``lightning.pytorch`` at import, that cost every worker
3.5 s of CPU (torch alone: 1.7 s) and those two files six workers. Each class here is trainmesh's;
the files mix the same steps into their Lightning twins.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm


# ---- test_spawn_outcome.py ---------------------------------------------------------------------
def outcome_data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g))


class OutcomeSteps:
    batch_size = 4

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
        self.log("train_loss", loss, on_step=True, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]), sync_dist=True)

    def test_step(self, batch, batch_idx):
        self.log("test_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(outcome_data(), batch_size=self.batch_size)

    val_dataloader = test_dataloader = train_dataloader


class OutcomeNet(OutcomeSteps, tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)


# ---- test_spawn_evaluation.py ------------------------------------------------------------------
def evaluation_data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=g)
    return TensorDataset(x, torch.randn(32, 1, generator=g), torch.arange(32))  # the sample's index last


def evaluation_weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1).state_dict()


class EvaluationSteps:
    batch_size = 4
    out = ""  # where a rank writes the samples it read (the spawned workers' only way back here)

    def validation_step(self, batch, batch_idx):
        x, y, index = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)
        if self.out:
            with open(Path(self.out) / f"rank{self.global_rank}.jsonl", "a") as file:
                file.write(json.dumps(index.tolist()) + "\n")

    def val_dataloader(self):
        return DataLoader(evaluation_data(), batch_size=self.batch_size)


class EvaluationNet(EvaluationSteps, tm.Module):
    def __init__(self, out: str):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.layer.load_state_dict(evaluation_weights())
        self.out = out
