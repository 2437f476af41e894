"""``fit(ckpt_path="hpc")`` as Lightning 2.6.6's checkpoint connector reads it: the ``hpc_ckpt_<N>.ckpt`` of
``default_root_dir`` with the highest N, else its ValueError. Before: trainmesh took "hpc" for a file name
("Checkpoint file not found: hpc")."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer

L = pytest.importorskip("lightning.pytorch")


def _fit_from_hpc(framework, root, versions: tuple[int, ...]) -> tuple:
    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(8, 2, generator=torch.Generator().manual_seed(0))), batch_size=2)
    for epochs in versions:  # hpc_ckpt_<epochs>.ckpt holds that many epochs
        first = quiet_trainer(framework=framework, max_epochs=epochs, default_root_dir=root)
        first.fit(Net(), data)
        first.save_checkpoint(root / f"hpc_ckpt_{epochs}.ckpt")
    trainer = quiet_trainer(framework=framework, max_epochs=4, default_root_dir=root)
    try:
        trainer.fit(Net(), data, ckpt_path="hpc")
    except ValueError as error:
        return type(error).__name__, str(error)
    return trainer.ckpt_path.replace(str(root), ""), trainer.global_step


@pytest.mark.parametrize("versions", [(), (1, 3, 2)])
def test_fit_from_hpc_is_lightning_s(versions, tmp_path):
    (tmp_path / "pl").mkdir(), (tmp_path / "tm").mkdir()
    theirs = _fit_from_hpc(L, tmp_path / "pl", versions)
    assert _fit_from_hpc(tm, tmp_path / "tm", versions) == theirs
    assert theirs[0] == ("/hpc_ckpt_3.ckpt" if versions else "ValueError")
