"""Small models and data shared by the tests."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm


class TutorialModule(tm.Module):
    """The seed tutorial's model (001_*), with 64 inputs for the 8x8 digits."""

    def __init__(self, hidden_dim: int = 128, learning_rate: float = 0.0001, num_features: int = 64):
        super().__init__()
        self.save_hyperparameters()
        self.l1 = torch.nn.Linear(num_features, self.hparams.hidden_dim)
        self.l2 = torch.nn.Linear(self.hparams.hidden_dim, 10)

    def forward(self, x):
        x = x.view(x.size(0), -1)
        return self.l2(torch.relu(self.l1(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x)
        loss = F.cross_entropy(y_hat, y)
        return {"loss": loss, "y_hat": y_hat.detach()}

    def validation_step(self, batch, batch_idx):
        x, y = batch
        pred = torch.argmax(F.softmax(self(x), dim=1), dim=1)
        self.log("val_acc", (pred == y).float().mean(), prog_bar=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        pred = torch.argmax(F.softmax(self(x), dim=1), dim=1)
        self.log("test_acc", (pred == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class DropoutNet(tm.Module):
    """Dropout, a shuffled loader and a step LR scheduler: everything that makes resume hard."""

    def __init__(self, num_features: int = 16, lr: float = 0.05, scheduler_interval: str = "step"):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(num_features, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 4)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.7)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": self.hparams.scheduler_interval},
        }


def random_classification(
    num_samples: int = 96, num_features: int = 16, num_classes: int = 4, seed: int = 0
) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, num_features, generator=generator)
    y = torch.randint(0, num_classes, (num_samples,), generator=generator)
    return TensorDataset(x, y)


def loaders(batch_size: int = 8, shuffle: bool = True, num_workers: int = 0) -> tuple[DataLoader, DataLoader]:
    train = DataLoader(random_classification(), batch_size=batch_size, shuffle=shuffle, num_workers=num_workers)
    val = DataLoader(random_classification(40, seed=1), batch_size=batch_size)
    return train, val


def fp16_on_cpu() -> dict[str, Any]:
    """The Trainer arguments of float16 autocast with a GradScaler on the CPU, as Lightning allows it: the
    plugin (``Trainer(precision="16-mixed")`` on the CPU is "bf16-mixed", with Lightning's warning)."""
    from trainmesh.plugins import MixedPrecision

    return {"plugins": [MixedPrecision("16-mixed", "cpu")]}


def quiet_trainer(*, framework: Any = tm, **kwargs) -> Any:
    """A Trainer without progress bar, summary, logger or checkpoints, unless asked; ``framework``:
    trainmesh, or Lightning (``lightning.pytorch``) for the same Trainer beside it."""
    options = dict(
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        enable_checkpointing=False,
    )
    options.update(kwargs)
    return framework.Trainer(**options)


def flat_weights(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.state_dict().values() if p.is_floating_point()])
