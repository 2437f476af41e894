"""``callback_metrics`` / ``logged_metrics`` hold each value in the dtype Lightning gives it.

Expected dtypes taken from Lightning 2.6.6 running the same module (its
``logger_connector/result.py``: a logged value becomes float32 unless it is float32 or float64,
and an epoch value accumulates in float32, so it is float64 only where a float64 tensor was logged).
"""

import torch
import torch.nn.functional as F

import trainmesh as tm
from helpers.models import loaders, quiet_trainer
from trainmesh.loggers import CSVLogger

# Recorded from lightning.pytorch 2.6.6 (callback_metrics after fit with one validation run).
LIGHTNING_CALLBACK_DTYPES = {
    "a": torch.float32,
    "a_step": torch.float32,
    "a_epoch": torch.float32,
    "b": torch.float32,
    "b_step": torch.float32,
    "b_epoch": torch.float32,
    "c": torch.float32,
    "c_step": torch.float32,
    "c_epoch": torch.float32,
    "d": torch.float64,
    "d_step": torch.float64,
    "d_epoch": torch.float64,
    "e": torch.float32,
    "e_step": torch.float32,
    "e_epoch": torch.float32,
    "v": torch.float32,
}
# logged_metrics (with a logger: trainmesh sends step values only where a logger is)
LIGHTNING_LOGGED_EPOCH_DTYPES = {
    "v": torch.float32,
    "a_epoch": torch.float32,
    "b_epoch": torch.float32,
    "c_epoch": torch.float32,
    "d_epoch": torch.float64,
    "e_epoch": torch.float32,
}


class Logs(tm.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)
        self.losses = []

    def training_step(self, batch, batch_idx):
        loss = F.cross_entropy(self.layer(batch[0]), batch[1])
        self.losses.append(loss.detach())
        self.log("a", loss, on_step=True, on_epoch=True)  # float32
        self.log("b", 3, on_epoch=True)  # an int
        self.log("c", 2.5, on_epoch=True, reduce_fx="max")  # a Python float
        self.log("d", loss.double(), on_epoch=True)  # float64 stays float64
        self.log("e", loss.half(), on_epoch=True)  # float16 becomes float32
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("v", F.cross_entropy(self.layer(batch[0]), batch[1]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_epoch_and_step_values_have_lightnings_dtypes(tmp_path):
    train, val = loaders()
    module = Logs()
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=0, log_every_n_steps=1, logger=CSVLogger(tmp_path))
    trainer.fit(module, train, val)
    assert {k: v.dtype for k, v in trainer.callback_metrics.items()} == LIGHTNING_CALLBACK_DTYPES
    logged = {k: v.dtype for k, v in trainer.logged_metrics.items() if not k.endswith("_step")}
    assert logged == LIGHTNING_LOGGED_EPOCH_DTYPES
    assert (
        trainer.logged_metrics["d_step"].dtype == torch.float64
        and trainer.logged_metrics["e_step"].dtype == torch.float32
    )
    # The epoch mean itself in Lightning's arithmetic (_ResultMetric.update/compute): loss * batch
    # size added into a float32 sum (float64 once a float64 value is added), divided by the count.
    assert trainer.callback_metrics["a"].item() == _lightning_mean(module.losses).item()
    assert trainer.callback_metrics["d"].item() == _lightning_mean([loss.double() for loss in module.losses]).item()


def _lightning_mean(values: list[torch.Tensor], batch_size: int = 8) -> torch.Tensor:
    total, count = torch.tensor(0.0), torch.tensor(0)
    for value in values:
        total, count = total + value * batch_size, count + batch_size
    return total / count
