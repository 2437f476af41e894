"""``self.log`` in a module's ``lr_scheduler_step``: the same program run by Lightning 2.6 and by trainmesh,
compared as data."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

pytest.importorskip("lightning.pytorch")


def _log_in_scheduler_step(framework: str, root: str, interval: str) -> tuple[str, str]:
    """A module's own lr_scheduler_step that logs (a plateau scheduler each epoch, or a step-interval
    one each batch): the error's class and first sentence."""
    if framework == "lightning":
        import lightning.pytorch as pl
    else:
        import trainmesh as pl

    class Net(pl.LightningModule if framework == "lightning" else pl.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch).sum()
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            if interval == "epoch":
                scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
                return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "loss"}}
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

        def lr_scheduler_step(self, scheduler, metric):
            self.log("stepped", 1.0)
            scheduler.step() if metric is None else scheduler.step(metric)

    trainer = pl.Trainer(
        default_root_dir=root,
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    with pytest.raises(Exception) as raised:
        trainer.fit(Net(), DataLoader(torch.randn(4, 4), batch_size=2))
    return type(raised.value).__name__, str(raised.value).split(" HINT")[0]


@pytest.mark.parametrize("interval", ["epoch", "step"])
def test_logging_in_lr_scheduler_step_raises_as_in_lightning(tmp_path, interval):
    """Lightning refuses self.log in lr_scheduler_step (its fx validator). Before, trainmesh recorded it: the
    plateau scheduler's call ran as on_train_epoch_end, the step-interval one's as the batch's hook."""
    lightning = _log_in_scheduler_step("lightning", str(tmp_path / "l"), interval)
    assert lightning == ("MisconfigurationException", "You can't `self.log()` inside `lr_scheduler_step`.")
    assert _log_in_scheduler_step("trainmesh", str(tmp_path / "t"), interval) == lightning
