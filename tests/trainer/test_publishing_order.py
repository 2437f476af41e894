"""``trainer.callback_metrics`` lists its names in Lightning's order.

Found running a user's program that prints ``trainer.callback_metrics`` after fit: Lightning 2.6.6
printed the training step's names first (``{'loss': ..., 'lr': ..., 'val_loss': ..., 'val_acc': ...}``),
trainmesh the validation names first (its dict was first filled at the first read, after validation).
Lightning's order: the training step's names at step 1 (``name``, then ``name_step``), then
validation's, then the training epoch's (``name_epoch``, what ``on_train_epoch_end`` logged).

A name is only updated within a run, as Lightning's dict: at the second epoch's start the first epoch's
training names are still there (trainmesh dropped the ones not logged yet in the new epoch).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning.pytorch")


def _names(framework: str, root: str, read_at_step: bool) -> list[list[str]]:
    if framework == "lightning":
        import lightning.pytorch as pl

        base, callback = pl.LightningModule, pl.Callback
    else:
        import trainmesh as pl

        base, callback = pl.Module, pl.Callback
    seen: list[list[str]] = []

    class Net(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("a", loss)
            self.log("b", loss, on_epoch=True, prog_bar=True)
            return loss

        def on_train_epoch_end(self):
            self.log("c", 1.0)

        def validation_step(self, batch, batch_idx):
            self.log("val", self.layer(batch[0]).mean())
            self.log("val2", 1.0, on_step=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Reads(callback):  # type: ignore[misc, valid-type]
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 1:
                seen.append(list(trainer.callback_metrics))

        def on_train_epoch_start(self, trainer, *args):
            # the last epoch's names stay (Lightning only updates the dict within a run): l-progs13 p06
            seen.append(sorted(trainer.callback_metrics))

    torch.manual_seed(0)
    trainer = pl.Trainer(
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=[Reads()] if read_at_step else [],
    )
    loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
    trainer.fit(Net(), loader, loader)
    seen.append(list(trainer.callback_metrics))
    trainer.validate(trainer.lightning_module, loader, verbose=False)
    seen.append(list(trainer.callback_metrics))
    return seen


@pytest.mark.parametrize("read_at_step", [False, True])
def test_callback_metrics_names_come_in_lightnings_order(tmp_path, read_at_step):
    lightning = _names("lightning", str(tmp_path / "l"), read_at_step)
    assert lightning[-2] == ["a", "b", "b_step", "val", "val2", "val2_epoch", "b_epoch", "c"]
    assert _names("trainmesh", str(tmp_path / "t"), read_at_step) == lightning
