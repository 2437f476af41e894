"""The trainmesh script for benchmarks/startup.py: the seed MLP with Trainer(strategy="ddp", devices=2).

Run as ``python trainmesh_ddp.py`` it starts its own workers; under torchrun it uses torchrun's.
Each process marks its phases (startup_common.mark).
"""

from startup_common import BATCH, STEPS, generated_data, mark

mark("start")  # the first line of user code

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import trainmesh as tm  # noqa: E402

mark("imported")


class MLPModule(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
        )

    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            mark("first_step")
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


x, y = generated_data()
torch.manual_seed(0)
model = MLPModule()
mark("built")
trainer = tm.Trainer(
    strategy="ddp",
    devices=2,
    accelerator="cpu",
    max_steps=STEPS,
    enable_progress_bar=False,
    logger=False,
    enable_checkpointing=False,
    enable_model_summary=False,
)
mark("trainer")
trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=BATCH))
mark("trained")
mark("end")
