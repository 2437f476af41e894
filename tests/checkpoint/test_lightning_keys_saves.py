"""Lightning 2.6.6's ``loops`` entry, the whole nested dict, at every point a program saves during a fit:
in ``on_train_batch_end`` (the batch not yet completed: ``batch_progress.*.completed`` one lower;
``is_last_batch`` at the epoch's last), in ``on_train_epoch_end``, in ``on_validation_end``
(``_batches_that_stepped`` without that batch's step), ``ModelCheckpoint(every_n_train_steps=2)``, and
after the fit (the last epoch's counts kept); with ``accumulate_grad_batches=3`` over 5 batches the
optimizer ``step``/``zero_grad`` counts are the epoch's steps and accumulation windows, not its batches;
in manual optimization Lightning's step counts are never reset per epoch. Before, trainmesh wrote the
batches for the steps, ``completed`` one higher, and zeros after the fit."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402

_G = torch.Generator().manual_seed(0)
X, Y = torch.randn(20, 4, generator=_G), torch.randn(20, 1, generator=_G)


def _module(framework, manual: bool):
    class Net(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.automatic_optimization = not manual

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            if not manual:
                return loss
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(loss)
            if batch_idx % 2 == 0:
                optimizer.step()
            return None

        def validation_step(self, batch, batch_idx):
            self.log("v", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [{"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.9), "interval": "step"}]

        def train_dataloader(self):
            return DataLoader(TensorDataset(X, Y), batch_size=4)

        def val_dataloader(self):
            return DataLoader(TensorDataset(X, Y), batch_size=8)

    return Net()


def _loops_at_saves(framework, root, *, accumulate: int, manual: bool) -> dict[str, dict]:
    saved: dict[str, dict] = {}

    def save(trainer, name):
        trainer.save_checkpoint(root / "save.ckpt")
        saved[name] = torch.load(root / "save.ckpt", weights_only=False)["loops"]

    class Saver(framework.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            save(trainer, f"batch_end {trainer.current_epoch} {batch_idx}")

        def on_train_epoch_end(self, trainer, pl_module):
            save(trainer, f"epoch_end {trainer.current_epoch}")

        def on_validation_end(self, trainer, pl_module):
            if not trainer.sanity_checking:
                save(trainer, f"validation_end {trainer.current_epoch}")

    framework.seed_everything(0)
    every_2_steps = framework.callbacks.ModelCheckpoint(dirpath=root / "mc", every_n_train_steps=2, save_top_k=-1)
    trainer = framework.Trainer(
        max_epochs=2,
        limit_train_batches=5,
        limit_val_batches=2,
        accumulate_grad_batches=accumulate,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        default_root_dir=root,
        callbacks=[Saver(), every_2_steps],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(_module(framework, manual))
    save(trainer, "after fit")
    for path in sorted((root / "mc").iterdir()):
        saved[path.name] = torch.load(path, weights_only=False)["loops"]
    return saved


@pytest.mark.parametrize(("accumulate", "manual"), [(3, False), (1, True)])
def test_loops_entry_at_every_save_as_lightning_s(tmp_path, accumulate, manual):
    theirs = _loops_at_saves(L, tmp_path / "pl", accumulate=accumulate, manual=manual)
    ours = _loops_at_saves(tm, tmp_path / "tm", accumulate=accumulate, manual=manual)
    assert list(ours) == list(theirs)
    for name, loops in theirs.items():
        assert ours[name] == loops, name
