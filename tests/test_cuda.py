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


def test_sync_batchnorm_on_one_gpu_trains_as_lightning():
    """One GPU: nothing to sync; Lightning's single-device strategy applies no layer sync, and the
    weights after fit are Lightning's (plugins/layer_sync.py, trainer/model_placement.py)."""
    pl = pytest.importorskip("lightning.pytorch")
    import trainmesh as tm

    weights = []
    for framework in (pl, tm):
        framework.seed_everything(1)

        class Net(framework.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))

            def training_step(self, batch, batch_idx):
                return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        g = torch.Generator().manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(12, 3, generator=g), torch.randn(12, 1, generator=g))
        net = Net()
        framework.Trainer(
            accelerator="cuda",
            devices=1,
            max_steps=3,
            sync_batchnorm=True,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
        ).fit(net, torch.utils.data.DataLoader(data, batch_size=4))
        weights.append({k: v.cpu() for k, v in net.state_dict().items()})
    assert all(torch.equal(weights[1][k], v) for k, v in weights[0].items())


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_sync_batchnorm_on_two_gpus_converts_for_fit_and_reverts(tmp_path):
    """Two GPUs under ddp: the batch norms are torch's SyncBatchNorm during fit (Lightning's
    TorchSyncBatchNorm.apply) and batch norms again after it (its revert)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import torch, trainmesh as tm\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "class Net(tm.LightningModule):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))\n"
        "    def training_step(self, batch, batch_idx):\n"
        "        assert type(self.net[1]).__name__ == 'SyncBatchNorm'\n"
        "        return self.net(batch[0]).pow(2).mean()\n"
        "    def configure_optimizers(self):\n"
        "        return torch.optim.SGD(self.parameters(), lr=0.1)\n"
        "if __name__ == '__main__':\n"
        "    m = Net(); t = tm.Trainer(accelerator='cuda', devices=2, strategy='ddp', max_steps=2, sync_batchnorm=True,\n"
        "        logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)\n"
        "    t.fit(m, DataLoader(TensorDataset(torch.randn(16, 3)), batch_size=4))\n"
        "    assert type(m.net[1]).__name__ != 'SyncBatchNorm', type(m.net[1])  # reverted where it trained\n"
    )
    runner = tmp_path / "sync_bn.py"
    runner.write_text(code)
    result = subprocess.run(
        [sys.executable, str(runner)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
