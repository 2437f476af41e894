"""The seed's 784-128-10 MLP as a raw module, a trainmesh Module and a Lightning module, so that
every benchmark times the same network (its layers under ``.net``, with the same names)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

import trainmesh as tm


def one_epoch_options(*, defaults: bool, root: str) -> dict[str, Any]:
    """Trainer arguments (trainmesh's and Lightning's alike) for one CPU epoch: ``defaults`` as a
    user gets ``Trainer()`` (progress bar, logger, checkpoint, summary), else with those off."""
    options: dict[str, Any] = dict(max_epochs=1, accelerator="cpu", devices=1, default_root_dir=root)
    if defaults:
        return {**options, "num_sanity_val_steps": 0}
    return {
        **options,
        "enable_progress_bar": False,
        "logger": False,
        "enable_checkpointing": False,
        "enable_model_summary": False,
    }


def handwritten_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: Any) -> None:
    """One epoch as the hand-written references train: forward, cross-entropy, backward, step."""
    model.train()
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def build_mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


class MLPModule(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = build_mlp()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def lightning_mlp() -> Any:
    """The same module for Lightning (imported only when a benchmark compares with it)."""
    import lightning as L

    class LitMLP(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = build_mlp()

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    return LitMLP()
