"""A number logged with ``sync_dist=True`` is Lightning's float32 tensor, as without it.

Found running a user's manual-accumulation program (``self.log_dict({"lr": sch.get_last_lr()[0]},
sync_dist=True)``): Lightning 2.6.6 gave ``callback_metrics["lr"]`` as float32 0.04100000113, trainmesh
as float64 0.041 (its sync path made the Python float a float64 tensor before the reduction).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning.pytorch")


def _metrics(framework: str, root: str) -> dict[str, Any]:
    if framework == "lightning":
        import lightning.pytorch as pl

        base = pl.LightningModule
    else:
        import trainmesh as pl

        base = pl.Module

    class Net(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log_dict({"lr": 0.1 * (batch_idx + 1), "count": 3}, sync_dist=True)
            self.log("both", 0.3, sync_dist=True, on_step=True, on_epoch=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    trainer = pl.Trainer(
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    trainer.fit(Net(), DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4))
    return {k: (v.dtype, v.item()) for k, v in sorted(trainer.callback_metrics.items())}


def test_a_number_logged_with_sync_dist_is_lightnings_float32(tmp_path):
    lightning = _metrics("lightning", str(tmp_path / "l"))
    assert lightning["lr"] == (torch.float32, torch.tensor(0.2).item())
    assert _metrics("trainmesh", str(tmp_path / "t")) == lightning
