"""What ``self.log`` hands the loggers on its fast path (a scalar tensor or a number, on_step in
training_step): the value logged, read only at the loggers' cadence; and, on CUDA, no wait for
the device inside a step. The epoch means and the rest are in test_fit_loop.py and tests/loggers."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import trainmesh as tm
from helpers.models import quiet_trainer, random_classification
from trainmesh.loggers import Logger


class Rows(Logger):
    """Keeps what the Trainer sends, in memory."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "rows"

    @property
    def version(self) -> int:
        return 0

    @property
    def log_dir(self) -> str:
        return "."

    def log_hyperparams(self, params) -> None:
        pass

    def log_metrics(self, metrics, step) -> None:
        self.rows.append((step, dict(metrics)))


class LogsNumbers(tm.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(16, 4)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        self.log("lr", 0.1)  # not a float32 number: it must reach the logger as 0.1
        self.log("third", 1 / 3, on_epoch=True)
        self.log("batch", batch_idx)  # an int
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _lightning_third_mean(steps: int = 12, batch_size: int = 8) -> float:
    """The epoch mean of ``self.log("third", 1 / 3)`` in Lightning's arithmetic (_ResultMetric):
    1/3 as a float32 tensor, times the batch size added into a float32 sum, divided by the count."""
    third, total = torch.tensor(1 / 3, dtype=torch.float32), torch.tensor(0.0)
    for _ in range(steps):
        total = total + third * batch_size
    return (total / torch.tensor(steps * batch_size)).item()


def test_numbers_reach_the_loggers_as_logged_at_their_cadence():
    rows = Rows()
    trainer = quiet_trainer(max_epochs=1, logger=rows, log_every_n_steps=4)
    trainer.fit(LogsNumbers(), DataLoader(random_classification(96), batch_size=8))  # 12 steps
    step_rows = [(step, metrics) for step, metrics in rows.rows if "lr" in metrics]
    # Lightning's logger steps: the batches that stepped before this one (tests/trainer/test_differential.py)
    assert [step for step, _ in step_rows] == [3, 7, 11]
    for step, metrics in step_rows:
        assert metrics["lr"] == 0.1 and metrics["third_step"] == 1 / 3
        assert metrics["batch"] == step
        assert isinstance(metrics["loss"], float)
    epoch_row = next(metrics for _, metrics in rows.rows if "third_epoch" in metrics)
    assert epoch_row["third_epoch"] == _lightning_third_mean()
    # Handed to callbacks as tensors, as before: the default dtype for a number.
    assert trainer.callback_metrics["lr"].dtype == torch.get_default_dtype()
    # logged_metrics too, as Lightning 2.6.6 (float32: its item() is 0.1 rounded to float32); the loggers got 0.1
    assert trainer.logged_metrics["lr"].dtype == torch.float32
    assert trainer.logged_metrics["lr"].item() == torch.tensor(0.1, dtype=torch.float32).item()


@pytest.mark.cuda
def test_on_cuda_a_training_step_with_self_log_never_waits_for_the_device():
    class SyncsAreErrors(tm.Callback):
        # Between a batch's start and end: forward, self.log, the finiteness check, backward and
        # the optimizer step. Any host-device synchronisation in there raises.
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            torch.cuda.set_sync_debug_mode("error")

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            torch.cuda.set_sync_debug_mode("default")

    class LogsOnCuda(LogsNumbers):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.log("loss_epoch_mean", loss, on_epoch=True, prog_bar=True)
            return loss

    data = random_classification(96)
    on_device = TensorDataset(*(t.cuda() for t in data.tensors))  # no host-to-device copy in the step
    rows = Rows()
    trainer = quiet_trainer(
        accelerator="cuda", max_epochs=1, logger=rows, log_every_n_steps=1000, callbacks=[SyncsAreErrors()]
    )
    try:
        trainer.fit(LogsOnCuda(), DataLoader(on_device, batch_size=8))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.global_step == 12
    assert trainer.callback_metrics["loss_epoch_mean"].isfinite()
    epoch_row = next(metrics for _, metrics in rows.rows if "third_epoch" in metrics)
    assert epoch_row["third_epoch"] == _lightning_third_mean()
