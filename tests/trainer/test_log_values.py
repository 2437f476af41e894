"""What ``self.log`` hands the loggers on its fast path (a scalar tensor or a number, on_step in
training_step): the value logged (a number as Lightning's float32), read only at the loggers' cadence; and, on CUDA, no wait for
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
        self.log("lr", 0.1)  # not a float32 number: the loggers get float32's, as Lightning's
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


def _float32(number: float) -> float:
    return torch.tensor(number, dtype=torch.float32).item()


def test_numbers_reach_the_loggers_as_lightnings_float32_at_their_cadence():
    rows = Rows()
    trainer = quiet_trainer(max_epochs=1, logger=rows, log_every_n_steps=4)
    trainer.fit(LogsNumbers(), DataLoader(random_classification(96), batch_size=8))  # 12 steps
    step_rows = [(step, metrics) for step, metrics in rows.rows if "lr" in metrics]
    # Lightning's logger steps: the batches that stepped before this one (tests/trainer/test_differential.py)
    assert [step for step, _ in step_rows] == [3, 7, 11]
    for step, metrics in step_rows:
        # Lightning 2.6.6 makes a logged number a float32 tensor; its loggers read that back
        assert metrics["lr"] == _float32(0.1) and metrics["third_step"] == _float32(1 / 3)
        assert metrics["batch"] == step
        assert isinstance(metrics["loss"], float)
    epoch_row = next(metrics for _, metrics in rows.rows if "third_epoch" in metrics)
    assert epoch_row["third_epoch"] == _lightning_third_mean()
    # Handed to callbacks as tensors, as before: the default dtype for a number.
    assert trainer.callback_metrics["lr"].dtype == torch.get_default_dtype()
    # logged_metrics too, as Lightning 2.6.6 (float32: its item() is 0.1 rounded to float32)
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


def _log_in_a_step(pl, value, reraise: bool = False) -> object:
    """One step logging ``value`` under a framework (Lightning 2.6 or trainmesh): the callback metric, or
    the exception's type."""
    import numpy as np  # noqa: F401 - values below are NumPy's

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            self.log("value", value)
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = pl.Trainer(fast_dev_run=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    loader = DataLoader(TensorDataset(torch.ones(2, 2)), batch_size=2)
    try:
        trainer.fit(Model(), loader)
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        if reraise:
            raise
        return type(exc).__name__
    return float(trainer.callback_metrics["value"])


def test_self_log_takes_the_numbers_lightning_takes_and_refuses_the_rest_with_its_exception():
    """Lightning's ``numbers.Number``: a bool and NumPy's float32 are logged (trainmesh refused them with a
    TypeError); ``None``, a string, a list or a nested dict raise Lightning's ValueError (2.6 and 1.9.5 alike)."""
    import warnings

    import numpy as np

    lightning = pytest.importorskip("lightning.pytorch")
    values = [True, np.float32(2.5), np.int64(3), None, "x", [1.0, 2.0], {"a": {"b": 1}}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = [_log_in_a_step(lightning, v) for v in values]
        ours = [_log_in_a_step(tm, v) for v in values]
    assert theirs == [1.0, 2.5, 3.0, "ValueError", "ValueError", "ValueError", "ValueError"]
    assert ours == theirs


def _reduced(pl, reduce_fx) -> object:
    """``self.log("v", batch_idx, reduce_fx=...)`` over 4 steps: the epoch value, or the exception's type."""

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            self.log("v", float(batch_idx), on_step=False, on_epoch=True, reduce_fx=reduce_fx)
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    loader = DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=1)
    try:
        trainer.fit(Model(), loader)
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        return type(exc).__name__
    return float(trainer.callback_metrics["v"])


def test_reduce_fx_takes_lightning_s_spellings():
    """``reduce_fx="avg"`` / ``"SUM"`` and Python's ``max`` / ``min`` / ``sum``, as Lightning (2.6 and 1.9.5) takes
    them (trainmesh took only the four lower-case names and torch's functions)."""
    import warnings

    lightning = pytest.importorskip("lightning.pytorch")
    spellings = ["avg", "SUM", max, min, sum, "Max"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = [_reduced(lightning, fx) for fx in spellings]
        ours = [_reduced(tm, fx) for fx in spellings]
    assert theirs == [1.5, 6.0, 3.0, 0.0, 6.0, 3.0]
    assert ours == theirs


def test_a_dict_value_is_refused_as_lightning_2_refuses_it_saying_what_to_log_instead():
    """Found by a 1.x UnetTrainer (l-progs6 p01): ``self.log('loss', {'train_loss': avg})``. pytorch-lightning
    1.9.5 logged the dict as one nested metric (csv cell "{'train_loss': 0.57}"); Lightning 2.6 raises
    ValueError "`dict` values cannot be logged", as trainmesh does, now with Lightning's words and the way out."""
    lightning = pytest.importorskip("lightning.pytorch")
    assert _log_in_a_step(lightning, {"train_loss": 1.0}) == "ValueError"
    with pytest.raises(ValueError, match=r"`dict` values cannot be logged.*self\.log_dict\(\{'value/<key>'"):
        _log_in_a_step(tm, {"train_loss": 1.0}, reraise=True)
