"""``Trainer(overfit_batches=3.0)``, a whole float above 1, as Lightning 2.6 runs it: its
``trainer.overfit_batches`` reads 3 but its limits keep the float (3 times each loader), so fit
trains and validates on every batch; a float above 1 with a fraction is refused with its message."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _run(framework, overfit_batches: float) -> tuple:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen: list = []

        def training_step(self, batch, batch_idx):
            self.seen.append(("train", batch_idx))
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            self.seen.append(("val", batch_idx))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    try:
        trainer = framework.Trainer(
            max_epochs=2,
            overfit_batches=overfit_batches,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
    except Exception as error:  # (trainmesh's is a subclass of MisconfigurationException, and a ValueError)
        return isinstance(error, framework.utilities.exceptions.MisconfigurationException), str(error)
    torch.manual_seed(0)
    model = Model()
    loader = DataLoader(TensorDataset(torch.arange(10.0).reshape(10, 1)), batch_size=2)
    trainer.fit(model, loader, loader)
    return trainer.overfit_batches, trainer.global_step, trainer.num_training_batches, model.seen, model.layer.weight


@pytest.mark.parametrize("overfit_batches", [3.0, 1.5])
def test_a_whole_float_above_one_trains_as_lightning_trains(overfit_batches: float) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _run(lightning, overfit_batches)
    got = _run(trainmesh, overfit_batches)
    if overfit_batches == 1.5:
        assert got == expected and expected[0] is True
        return
    assert got[:4] == expected[:4]
    assert expected[:3] == (3, 10, 5)
    torch.testing.assert_close(got[4], expected[4], rtol=0, atol=0)
