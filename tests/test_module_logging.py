"""``self.log`` of a torchmetrics ``Metric`` that is not an attribute of the module, as Lightning
2.6 refuses it (``MisconfigurationException``, its text), run under Lightning and trainmesh."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _outcome(framework, *, own_metric: bool) -> tuple[str, str]:
    torchmetrics = pytest.importorskip("torchmetrics")
    stray = torchmetrics.MeanMetric()

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            if own_metric:
                self.mean = torchmetrics.MeanMetric()

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).sum()
            stray.update(loss.detach())
            self.log("stray", stray)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = framework.Trainer(
        max_steps=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    try:
        trainer.fit(Model(), DataLoader(TensorDataset(torch.ones(4, 1)), batch_size=2))
    except Exception as error:
        return type(error).__name__, str(error)
    return "ran", ""


@pytest.mark.parametrize("own_metric", [False, True])
def test_a_metric_not_held_by_the_module_is_refused_as_lightning_refuses_it(own_metric: bool) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _outcome(lightning, own_metric=own_metric)
    assert expected[0] == "MisconfigurationException"
    assert _outcome(trainmesh, own_metric=own_metric) == expected
