"""``trainer.strategy.lr_scheduler_configs`` / ``.optimizers`` written by a callback, as Lightning 2.6's
strategy takes them: a warmup callback (users' pattern) swaps in a LambdaLR at interval "step" in
on_train_start and puts the module's schedulers back after N steps; the loop steps the swapped-in ones."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _run(framework, types, root) -> dict[str, object]:
    lrs: list[float] = []

    class Warmup(framework.Callback):
        def on_train_start(self, trainer, pl_module) -> None:
            self.original = trainer.lr_scheduler_configs
            warmup = torch.optim.lr_scheduler.LambdaLR(trainer.optimizers[0], lambda step: min(1.0, (step + 1) / 3))
            trainer.strategy.lr_scheduler_configs = [types.LRSchedulerConfig(scheduler=warmup, interval="step")]

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            lrs.append(trainer.strategy.optimizers[0].param_groups[0]["lr"])
            if trainer.global_step == 3:
                trainer.strategy.lr_scheduler_configs = self.original

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.4)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    torch.manual_seed(0)
    model = Model()
    monitor = framework.callbacks.LearningRateMonitor("step")
    trainer = framework.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=framework.loggers.CSVLogger(root),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Warmup(), monitor],
    )
    trainer.fit(model, DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2))
    return {
        "lrs": lrs,
        "weight": model.layer.weight.tolist(),
        "monitored": sorted(monitor.lrs),
        "schedulers": [type(c.scheduler).__name__ for c in trainer.lr_scheduler_configs],
    }


def test_a_callback_swapping_the_strategy_s_scheduler_configs_steps_them_as_lightning(tmp_path) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import lightning.pytorch.utilities.types as lightning_types

    import trainmesh
    import trainmesh.utilities.types as trainmesh_types

    expected = _run(lightning, lightning_types, tmp_path / "lightning")
    assert expected["lrs"][:5] == pytest.approx([0.4 / 3, 0.8 / 3, 0.4, 0.4, 0.2])  # warmup, then StepLR's epochs
    assert expected["monitored"] == ["lr-SGD"] and expected["schedulers"] == ["StepLR"]
    assert _run(trainmesh, trainmesh_types, tmp_path / "trainmesh") == expected
