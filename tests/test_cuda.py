"""Single-device training on CUDA; skipped without a GPU, run on a lent GPU machine."""

import pytest
import torch

from helpers.models import DropoutNet, loaders, quiet_trainer

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed"])
def test_fit_on_cuda_places_model_and_batches(precision):
    train, val = loaders()

    class DeviceProbe(DropoutNet):
        def training_step(self, batch, batch_idx):
            assert batch[0].device.type == "cuda" and self.device.type == "cuda"
            return super().training_step(batch, batch_idx)

    model = DeviceProbe()
    trainer = quiet_trainer(accelerator="cuda", devices=1, max_epochs=1, precision=precision)
    trainer.fit(model, train, val)
    assert next(model.parameters()).device.type == "cuda"
    if precision == "16-mixed":
        assert trainer.runtime.precision.scaler.get_scale() > 0
    assert torch.isfinite(torch.tensor(trainer.callback_metrics["val_loss"]))
