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


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_ddp_on_two_gpus_uses_nccl(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent / "strategies" / "ddp_run.py"
    out = tmp_path / "gpu.pt"
    code = (
        f"import sys, torch; sys.argv=['x']; sys.path.insert(0, {str(script.parent)!r}); import ddp_run as r;"
        "from helpers.models import quiet_trainer; from torch.utils.data import DataLoader\n"
        "if __name__ == '__main__':\n"
        "    t = quiet_trainer(accelerator='cuda', strategy='ddp', devices=2, max_epochs=1)\n"
        "    m = r.Net(); t.fit(m, DataLoader(r.dataset(), batch_size=16))\n"
        "    assert torch.distributed.get_backend() == 'nccl'\n"
        f"    t.is_global_zero and torch.save(m.state_dict(), {str(out)!r})\n"
    )
    runner = tmp_path / "gpu_ddp.py"
    runner.write_text(code)
    result = subprocess.run(
        [sys.executable, str(runner)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert out.exists()
