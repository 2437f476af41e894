"""An in-fit finder (``BatchSizeFinder``, ``LearningRateFinder``) in a fit that names a ``ckpt_path``, under
Lightning 2.6.6 and trainmesh: Lightning's search restores its temporary checkpoint, which takes the place of
the fit's (its checkpoint connector's path, the loaded checkpoint cleared), so the fit keeps the weights
restored before ``on_fit_start`` and starts its loops and optimizers afresh: ``on_train_start`` at step 0,
epoch 0, four whole epochs after a 2-epoch checkpoint, and ``trainer.ckpt_path`` the search's file (also
with no ``ckpt_path``). Before: trainmesh restored the named checkpoint after the search (step 32, epoch 2,
other weights) and kept ``ckpt_path`` as named (None without one)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer

L = pytest.importorskip("lightning.pytorch")


def _resumed(framework, root, finder: str, named: bool) -> tuple:
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    seen = []

    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer, self.batch_size, self.lr = nn.Linear(4, 1), 4, 0.01

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[0].sum(1, keepdim=True))

        def train_dataloader(self):
            return DataLoader(TensorDataset(x), batch_size=self.batch_size, shuffle=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

        def on_train_start(self):
            seen.append((self.trainer.global_step, self.trainer.current_epoch, self.batch_size))

    def trainer(epochs, callbacks=()):
        return quiet_trainer(framework=framework, max_epochs=epochs, default_root_dir=root, callbacks=list(callbacks))

    framework.seed_everything(0)
    first = trainer(2)
    first.fit(Net())
    first.save_checkpoint(os.path.join(root, "saved.ckpt"))
    framework.seed_everything(1)
    model, callbacks = Net(), framework.callbacks
    if finder == "batch_size":
        search = callbacks.BatchSizeFinder(max_trials=2, steps_per_trial=2)
    else:
        search = callbacks.LearningRateFinder(num_training_steps=5, min_lr=1e-4, max_lr=0.1)
    second = trainer(4, [search])
    second.fit(model, ckpt_path=os.path.join(root, "saved.ckpt") if named else None)
    named_file = os.path.basename(second.ckpt_path or "").split("_")[:-1]  # the search's file: its uuid left out
    return seen[-1], second.global_step, named_file, model.layer.weight.detach()


@pytest.mark.parametrize("named", [True, False])
@pytest.mark.parametrize("finder", ["batch_size", "learning_rate"])
def test_a_finder_s_search_takes_the_place_of_the_fit_s_checkpoint_as_lightning_s(finder, named, tmp_path):
    (tmp_path / "pl").mkdir(), (tmp_path / "tm").mkdir()
    theirs = _resumed(L, str(tmp_path / "pl"), finder, named)
    ours = _resumed(tm, str(tmp_path / "tm"), finder, named)
    assert theirs[0][:2] == (0, 0) and theirs[1] == 4 * 32 // theirs[0][2]  # the measured owner's, said above
    assert ours[:3] == theirs[:3]
    assert torch.equal(ours[3], theirs[3])
