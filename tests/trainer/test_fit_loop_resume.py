"""A fit resumed from a checkpoint taken at an epoch's end (in ``on_validation_end`` after its last
batch) with ``accumulate_grad_batches=3`` over 5 batches: the last batch stepped the optimizer, so the
resumed fit has no accumulation window to finish. Before, trainmesh stepped it again (one optimizer step
and one scheduler step more than Lightning 2.6.6: global_step 5 for 4, other weights)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

L = pytest.importorskip("lightning.pytorch")
import trainmesh as tm  # noqa: E402

_G = torch.Generator().manual_seed(0)
X, Y = torch.randn(20, 4, generator=_G), torch.randn(20, 1, generator=_G)


def _fit(framework, root, ckpt_path=None):
    class Net(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            return None

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return DataLoader(TensorDataset(X, Y), batch_size=4)

        def val_dataloader(self):
            return DataLoader(TensorDataset(X, Y), batch_size=8)

    class SaveAtFirstValidationEnd(framework.Callback):
        def on_validation_end(self, trainer, pl_module):
            if not trainer.sanity_checking and trainer.current_epoch == 0:
                trainer.save_checkpoint(root / "epoch0.ckpt")

    framework.seed_everything(0)
    model = Net()
    trainer = framework.Trainer(
        max_epochs=2,
        accumulate_grad_batches=3,
        limit_val_batches=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
        devices=1,
        default_root_dir=root,
        callbacks=[SaveAtFirstValidationEnd()],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, ckpt_path=ckpt_path)
    return trainer.global_step, model.layer.weight.detach().clone()


def test_resume_at_an_epoch_end_inside_a_window_steps_as_lightning(tmp_path):
    results = {}
    for name, framework in (("pl", L), ("tm", tm)):
        root = tmp_path / name
        whole = _fit(framework, root)
        resumed = _fit(framework, root / "resumed", ckpt_path=root / "epoch0.ckpt")
        results[name] = (whole, resumed)
    (pl_whole, pl_resumed), (tm_whole, tm_resumed) = results["pl"], results["tm"]
    assert pl_resumed[0] == pl_whole[0] == 4
    assert tm_whole[0] == tm_resumed[0] == 4
    assert torch.equal(tm_resumed[1], tm_whole[1]) and torch.allclose(tm_resumed[1], pl_resumed[1])
