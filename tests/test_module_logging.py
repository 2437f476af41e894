"""``self.log`` of a torchmetrics ``Metric`` that is not an attribute of the module, as Lightning
2.6 refuses it (``MisconfigurationException``, its text), run under Lightning and trainmesh."""

from __future__ import annotations

import sys

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


def _step_values(framework, root, *, change_at: int | None) -> tuple[dict[str, tuple[float, str]], str, list[int]]:
    """A 3-step fit logging step values (the loop's most common ``self.log`` calls) beside other
    options; ``change_at``: the step whose call of "loss" changes its arguments (``prog_bar``).
    Returns the trainer's metrics (value, dtype) and its CSVLogger's rows, the error raised, and the
    Python calls made by each repeated ``self.log("loss", loss)`` (trainmesh only)."""
    calls: list[int] = []

    def counted(log) -> None:
        count = [0]

        def profiler(frame, event, arg):
            count[0] += event in ("call", "c_call")

        sys.setprofile(profiler)
        log()
        sys.setprofile(None)
        calls.append(count[0] - 1)  # less setprofile's own c_call event

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            if batch_idx in (1, 2) and framework.__name__ == "trainmesh":
                counted(lambda: self.log("loss", loss))
            self.log("loss", loss, prog_bar=batch_idx == change_at)
            self.log("half", batch_idx + 0.5, prog_bar=True)  # (a float32 number: docs/how-to/lightning.md)
            self.log("count", batch_idx)
            self.log("third", (batch_idx + 1) / 3)  # not a float32 number: the loggers get float32's
            self.log("both", loss * 2, on_epoch=True, batch_size=3)
            self.log("r0", loss, rank_zero_only=True, logger=False)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    trainer = framework.Trainer(
        max_steps=3,
        accelerator="cpu",
        logger=framework.loggers.CSVLogger(root, name="csv", version=0),
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    error = ""
    try:
        trainer.fit(Model(), DataLoader(TensorDataset(torch.arange(6.0).view(6, 1)), batch_size=2))
    except Exception as raised:
        error = type(raised).__name__
    metrics = {
        f"{kind}/{name}": (float(value), str(getattr(value, "dtype", type(value))))
        for kind, logged in (
            ("callback", trainer.callback_metrics),
            ("logged", trainer.logged_metrics),
            ("bar", trainer.progress_bar_metrics),
        )
        for name, value in logged.items()
    }
    rows = (root / "csv" / "version_0" / "metrics.csv").read_text() if not error else ""
    return {**metrics, "metrics.csv": (rows, "")}, error, calls


@pytest.mark.parametrize("change_at", [None, 2])
def test_repeated_step_values_are_logged_as_lightnings_with_few_calls(change_at: int | None, tmp_path) -> None:
    """Module.log's path for a step value a hook logged before with the same arguments: the same
    metrics and logger rows as Lightning's, the same refusal when the arguments change, and 6 Python calls a call
    (Module.log, the entry's lookup, LogCollector.stored_step, type, is_floating_point, detach)."""
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected_metrics, expected_error, _ = _step_values(lightning, tmp_path / "lightning", change_at=change_at)
    metrics, error, calls = _step_values(trainmesh, tmp_path / "trainmesh", change_at=change_at)
    assert error == expected_error == ("" if change_at is None else "MisconfigurationException")
    if not error:  # (after the error, what each trainer kept of the step is not compared)
        assert metrics == expected_metrics
    assert calls == [6, 6]


def _nanmean(x):
    return x[~torch.isnan(x)].mean()


def _custom_reduction_error(framework, misconfiguration: type) -> tuple[bool, str]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).sum()
            self.log("f1", loss, reduce_fx=_nanmean)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = framework.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(Exception) as error:
        trainer.fit(Model(), DataLoader(TensorDataset(torch.ones(4, 1)), batch_size=2))
    return isinstance(error.value, misconfiguration), str(error.value)


def test_a_custom_reduce_fx_is_refused_with_lightnings_exception_and_words() -> None:
    """``self.log(..., reduce_fx=nanmean)`` (a user's function; an avalanche segmentation's, stored file 5653089668):
    Lightning 2.6 and pytorch-lightning 1.9.5 raise MisconfigurationException "Only `self.log(...,
    reduce_fx={min,max,mean,sum})` are supported. ..." (1.9.5's words checked in the l1-progs16 campaign). Before:
    trainmesh's ValueError with its own words."""
    lightning = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.utilities.exceptions import MisconfigurationException as LightningMisconfiguration

    import trainmesh
    from trainmesh.utilities.exceptions import MisconfigurationException

    expected = _custom_reduction_error(lightning, LightningMisconfiguration)
    assert expected[0] and expected[1].startswith("Only `self.log(..., reduce_fx={min,max,mean,sum})` are supported.")
    assert _custom_reduction_error(trainmesh, MisconfigurationException) == expected
    assert _custom_reduction_error(trainmesh, ValueError)[0]  # still caught as trainmesh's ValueError was
