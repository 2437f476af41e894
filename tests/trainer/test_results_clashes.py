"""A name two hooks of one training epoch log, and ``self.log`` in ``lr_scheduler_step``: the same program
run by Lightning 2.6 and by trainmesh, compared as data."""

from __future__ import annotations

from typing import Any

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


def _start_hook_and_step_values(framework: str, root: str) -> list[Any]:
    """on_validation_epoch_start logs a name the steps log per step and per epoch (one loader): what
    validate() returns, callback_metrics and progress_bar_metrics after it, and the loggers' rows."""
    if framework == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch.loggers import Logger
    else:
        import trainmesh as pl
        from trainmesh.loggers import Logger
    seen: list[Any] = []

    class Rows(Logger):
        name, version, experiment = "rows", 0, None

        def log_metrics(self, metrics, step=None):
            seen.append(("row", step, sorted((k, round(float(v), 5)) for k, v in metrics.items())))

        def log_hyperparams(self, *args, **kwargs):
            pass

    class Net(pl.LightningModule if framework == "lightning" else pl.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def on_validation_epoch_start(self):
            self.log("val", 100.0)

        def validation_step(self, batch, batch_idx):
            self.log("val", self.layer(batch).sum(), on_step=True)

    torch.manual_seed(0)
    trainer = pl.Trainer(default_root_dir=root, logger=Rows(), enable_progress_bar=False, enable_model_summary=False)
    results = trainer.validate(Net(), DataLoader(torch.randn(4, 4), batch_size=2), verbose=False)
    seen.append([sorted((k, round(v, 5)) for k, v in r.items()) for r in results])
    seen.append(sorted((k, round(float(v), 5)) for k, v in trainer.callback_metrics.items()))
    seen.append(sorted((k, round(float(v), 5)) for k, v in trainer.progress_bar_metrics.items()))
    return seen


def test_a_name_logged_at_validation_start_and_per_step_reads_the_steps_value_as_in_lightning(tmp_path):
    """Lightning's later entry of the name (the steps') sets callback_metrics['val']; the start hook's 100.0
    stays in the results and the row as 'val'. Before, trainmesh's callback_metrics['val'] was 100.0."""
    lightning = _start_hook_and_step_values("lightning", str(tmp_path / "l"))
    assert dict(lightning[-2])["val"] != 100.0
    assert _start_hook_and_step_values("trainmesh", str(tmp_path / "t")) == lightning
