"""What callback_metrics, logged_metrics and progress_bar_metrics show while validation and test run,
the same program run by Lightning 2.6 and by trainmesh and compared as data: a callback's
``on_*_epoch_end`` log is read by the module's hook after it (Lightning computes its result collection
when read); as the batches move on to a second validation loader, the first loader's epoch values are
shown to the second's batch hooks; the sanity check's step values logged for the bar are in the bar."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

pytest.importorskip("lightning.pytorch")


def _program(framework: str, root: str) -> list[Any]:
    if framework == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch.callbacks import Callback
    else:
        import trainmesh as pl
        from trainmesh.callbacks import Callback
    seen: list[Any] = []

    def record(trainer: Any, hook: str) -> None:
        views = (trainer.callback_metrics, trainer.logged_metrics, trainer.progress_bar_metrics)
        seen.append(
            (hook, trainer.current_epoch, [{k: round(float(v), 4) for k, v in sorted(d.items())} for d in views])
        )

    class Logs(Callback):
        def on_validation_batch_end(self, trainer, pl_module, *args):
            record(trainer, "on_validation_batch_end")
            pl_module.log("cb_step", 70.0 + trainer.current_epoch, on_step=True, on_epoch=True, prog_bar=True)

        def on_validation_epoch_end(self, trainer, pl_module):
            pl_module.log("cb_val_end", 10.0 + trainer.current_epoch)

        def on_train_epoch_end(self, trainer, pl_module):
            pl_module.log("cb_train_end", 30.0 + trainer.current_epoch)

        def on_test_epoch_end(self, trainer, pl_module):
            pl_module.log("cb_test_end", 20.0)

    class Net(pl.LightningModule if framework == "lightning" else pl.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val", float(batch_idx + 10 * dataloader_idx + 100 * self.current_epoch))

        def test_step(self, batch, batch_idx):
            self.log("tst", float(batch_idx))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_train_epoch_end(self):
            record(self.trainer, "module.on_train_epoch_end")

        def on_validation_epoch_end(self):
            record(self.trainer, "module.on_validation_epoch_end")

        def on_test_epoch_end(self):
            record(self.trainer, "module.on_test_epoch_end")

    torch.manual_seed(0)
    loader = DataLoader(torch.randn(4, 4), batch_size=2)
    trainer = pl.Trainer(
        default_root_dir=root,
        max_epochs=2,
        num_sanity_val_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        callbacks=[Logs()],
    )
    model = Net()
    trainer.fit(model, loader, [loader, loader])
    trainer.test(model, loader)
    return seen


def test_what_validation_and_test_hooks_read_in_callback_metrics_is_lightnings(tmp_path):
    theirs = _program("lightning", str(tmp_path / "lightning"))
    ours = _program("trainmesh", str(tmp_path / "trainmesh"))
    assert ours == theirs
    # what the comparison covers: a callback's epoch-end value read by the module's hook, a first
    # loader's epoch value read by the second loader's batch hooks, the sanity check's bar
    assert theirs[-1][2][0]["cb_test_end"] == 20.0
    after_callbacks = [views[0] for hook, epoch, views in theirs if hook == "module.on_validation_epoch_end"]
    assert [views.get("cb_val_end") for views in after_callbacks] == [10.0, 10.0, 11.0]
    assert any(views[0].get("val/dataloader_idx_0") == 100.5 for hook, epoch, views in theirs if epoch == 1)
    assert theirs[0][2][2] == {} and theirs[1][2][2] == {"cb_step_step/dataloader_idx_0": 70.0}
