"""``self.log``'s arguments as Lightning 2.6 defines them: the same program is run under Lightning
and trainmesh and the metrics compared (``add_dataloader_idx``, ``enable_graph``,
``metric_attribute``, ``rank_zero_only``), and a name two loaders log with
``add_dataloader_idx=False`` is refused by both."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _run(framework, *, same_name: bool) -> tuple[dict[str, float], list[dict[str, float]]]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss, enable_graph=True, rank_zero_only=True, metric_attribute=None)
            return loss

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            x, y = batch
            name = "val" if same_name else ["val", "holdout"][dataloader_idx]
            self.log(name, torch.nn.functional.mse_loss(self.layer(x), y), add_dataloader_idx=False)
            self.log("index", float(dataloader_idx))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    first = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    second = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    loaders = [DataLoader(first, batch_size=8), DataLoader(second, batch_size=8)]
    trainer = framework.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = Model()
    trainer.fit(model, DataLoader(first, batch_size=8), loaders)
    fitted = {k: float(v) for k, v in trainer.callback_metrics.items()}
    return fitted, trainer.validate(model, loaders, verbose=False)


def test_log_arguments_give_lightning_s_metric_names_and_values() -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected_fit, expected_validate = _run(lightning, same_name=False)
    fit, validate = _run(trainmesh, same_name=False)
    assert (
        sorted(fit)
        == sorted(expected_fit)
        == ["holdout", "index/dataloader_idx_0", "index/dataloader_idx_1", "train_loss", "val"]
    )
    assert fit == pytest.approx(expected_fit, rel=1e-6)
    assert [sorted(m) for m in validate] == [sorted(m) for m in expected_validate]
    for ours, theirs in zip(validate, expected_validate):
        assert ours == pytest.approx(theirs, rel=1e-6)


def test_one_name_logged_by_two_loaders_without_their_index_is_refused_as_lightning_refuses_it() -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    from lightning.fabric.utilities.exceptions import MisconfigurationException as LightningError

    import trainmesh
    from trainmesh.utilities.exceptions import MisconfigurationException

    with pytest.raises(LightningError, match=r"self.log\(val, ...\)` twice"):
        _run(lightning, same_name=True)
    with pytest.raises(MisconfigurationException, match=r"self.log\(val, ...\)` twice"):
        _run(trainmesh, same_name=True)


def _one_process_group_log(framework, group_of_call) -> str | dict[str, float]:
    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).mean()
            self.log("loss", loss, sync_dist=True, sync_dist_group=group_of_call())
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    trainer = framework.Trainer(
        max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    try:
        trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=2))
    except Exception as error:  # noqa: BLE001 - the outcome compared is which error, and its words
        return f"{type(error).__name__}: {error}"
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


def test_sync_dist_group_on_one_process_is_lightning_s_no_op_and_a_changed_group_is_refused() -> None:
    """On one process Lightning's sync does nothing, whatever ``sync_dist_group`` is; a call with another
    group than the name's first call is its "different arguments" error (before: trainmesh refused any
    group but one of every data-parallel process, here with a ValueError)."""
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    same = object()
    for group_of_call in (lambda: same, object):
        expected = _one_process_group_log(lightning, group_of_call)
        assert _one_process_group_log(trainmesh, group_of_call) == expected
    assert "twice in `training_step` with different arguments" in expected


def _reduced(framework) -> dict[str, float]:
    """The epoch value of one value per step reduced by each of Lightning's ``reduce_fx`` spellings."""
    spellings = {"py_max": max, "py_min": min, "py_sum": sum, "torch_max": torch.max, "avg": "avg", "SUM": "SUM"}

    class Model(framework.LightningModule if hasattr(framework, "LightningModule") else framework.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            for name, reduce_fx in spellings.items():
                self.log(name, float(batch_idx + 1), on_step=False, on_epoch=True, reduce_fx=reduce_fx)
            return self.layer(batch).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = framework.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(Model(), DataLoader(torch.ones(4, 1), batch_size=1))
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


def test_reduce_fx_spellings_reduce_as_lightning_s() -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _reduced(lightning)
    assert expected == {"py_max": 4.0, "py_min": 1.0, "py_sum": 10.0, "torch_max": 4.0, "avg": 2.5, "SUM": 10.0}
    assert _reduced(trainmesh) == expected


@pytest.mark.parametrize("value", [None, "foo", [1, 2, 3], {"a": 1}])
def test_a_value_that_cannot_be_logged_raises_lightning_s_value_error(value) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    for framework in (lightning, trainmesh):
        base = framework.LightningModule if framework is lightning else framework.Module

        class Model(base):
            def __init__(self) -> None:
                super().__init__()
                self.layer = torch.nn.Linear(1, 1)

            def training_step(self, batch, batch_idx):
                self.log("foo", value)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        trainer = framework.Trainer(fast_dev_run=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
        with pytest.raises(ValueError, match="foo"):
            trainer.fit(Model(), DataLoader(torch.ones(2, 1)))


def test_a_name_with_a_loader_suffix_is_refused_as_lightning_refuses_it() -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    from lightning.fabric.utilities.exceptions import MisconfigurationException as LightningError

    import trainmesh
    from trainmesh.utilities.exceptions import MisconfigurationException

    for framework, error in ((lightning, LightningError), (trainmesh, MisconfigurationException)):
        base = framework.LightningModule if framework is lightning else framework.Module

        class Model(base):
            def __init__(self) -> None:
                super().__init__()
                self.layer = torch.nn.Linear(1, 1)

            def training_step(self, batch, batch_idx):
                self.log("foo/dataloader_idx_0", 1.0)
                return self.layer(batch).sum()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        trainer = framework.Trainer(fast_dev_run=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
        with pytest.raises(error, match="`self.log` with the key `foo/dataloader_idx_0`"):
            trainer.fit(Model(), DataLoader(torch.ones(2, 1)))


def test_logging_neither_on_step_nor_on_epoch_is_refused_as_lightning_refuses_it() -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    from lightning.fabric.utilities.exceptions import MisconfigurationException as LightningError

    import trainmesh
    from trainmesh.utilities.exceptions import MisconfigurationException

    for framework, error in ((lightning, LightningError), (trainmesh, MisconfigurationException)):
        base = framework.LightningModule if framework is lightning else framework.Module

        class Model(base):
            def __init__(self) -> None:
                super().__init__()
                self.layer = torch.nn.Linear(1, 1)

            def training_step(self, batch, batch_idx):
                self.log("foo", 1.0, on_step=False, on_epoch=False)
                return self.layer(batch).sum()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        trainer = framework.Trainer(fast_dev_run=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
        with pytest.raises(error, match="is not useful"):
            trainer.fit(Model(), DataLoader(torch.ones(2, 1)))
