"""Several evaluation loaders and a step without ``dataloader_idx`` stop before the first batch, as Lightning's.

Found porting a 1.x matcher (l-progs4 p04): ``trainer.validate(model, [loader_a, loader_b])`` with
``validation_step(self, batch, batch_idx)``. Lightning 2.6 raises its RuntimeError before any batch
(pytorch-lightning 1.9.5 a TypeError at the first); trainmesh called the step without the index and ran
both loaders' batches as if from one, with per-loader metrics.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("lightning.pytorch")


def _error(framework: str, stage: str, hook: str) -> str:
    if framework == "lightning":
        import lightning.pytorch as pl

        base = pl.LightningModule
    else:
        import trainmesh as pl

        base = pl.Module
    seen = []

    class Net(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            seen.append(batch_idx)

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            seen.append(batch_idx)

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            seen.append(batch_idx)

    def without_index(self, batch, batch_idx):
        seen.append(batch_idx)

    setattr(Net, hook, without_index)  # the hook under test takes no dataloader_idx
    loader = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(RuntimeError) as raised:
        getattr(trainer, stage)(Net(), [loader, loader])
    assert seen == []
    return str(raised.value)


@pytest.mark.parametrize(
    ("stage", "hook"),
    [
        ("validate", "validation_step"),
        ("test", "test_step"),
        ("predict", "predict_step"),
        ("validate", "on_validation_batch_end"),
    ],
)
def test_several_loaders_and_no_dataloader_idx_stop_as_lightnings(stage, hook):
    assert _error("trainmesh", stage, hook) == _error("lightning", stage, hook)
