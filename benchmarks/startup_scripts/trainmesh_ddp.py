"""The trainmesh script for benchmarks/startup.py: the seed MLP with Trainer(strategy="ddp", devices=2).

Run as ``python trainmesh_ddp.py`` it starts its own workers; under torchrun it uses torchrun's.
Each process appends "<rank> <phase> <time.time()>" lines to the file STARTUP_MARKS names
(rank "agent" in the process that launches the workers).
"""
import os
import time

_MARKS = os.environ.get("STARTUP_MARKS")


def mark(phase: str) -> None:
    if _MARKS:
        with open(_MARKS, "a") as file:
            file.write(f"{os.environ.get('RANK', 'agent')} {phase} {time.time()}\n")


mark("start")  # the first line of user code

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import trainmesh as tm  # noqa: E402

mark("imported")
STEPS, BATCH, SAMPLES = int(os.environ.get("STARTUP_STEPS", "30")), 16, 4096


class MLPModule(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                       torch.nn.Linear(128, 10))

    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            mark("first_step")
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


generator = torch.Generator().manual_seed(0)
x = torch.randn(SAMPLES, 784, generator=generator)
y = (x @ torch.randn(784, 10, generator=generator)).argmax(dim=1)
torch.manual_seed(0)
model = MLPModule()
mark("built")
trainer = tm.Trainer(strategy="ddp", devices=2, accelerator="cpu", max_steps=STEPS, enable_progress_bar=False,
                     logger=False, enable_checkpointing=False, enable_model_summary=False)
mark("trainer")
trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=BATCH))
mark("trained")
mark("end")
