"""What ``self.log`` records in the start hooks, the same program run by Lightning 2.6 and by trainmesh
and compared as data (Lightning's tests_pytorch/trainer/logging_/test_train_loop_logging.py
``test_log_on_train_start``): ``on_train_start`` and ``on_train_epoch_start`` log on epoch into the
(first) epoch's row, ``on_validation_start`` and ``on_validation_epoch_start`` into the validation's
row and ``validate()``'s result; the loggers get ``log_metrics(metrics=..., step=...)`` by keyword."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

pytest.importorskip("lightning.pytorch")


def _program(framework: str, root: str) -> dict[str, Any]:
    if framework == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch.loggers import Logger
    else:
        import trainmesh as pl
        from trainmesh.loggers import Logger
    rows: list[Any] = []

    class Keywords(Logger):  # takes the metrics by keyword only, as Lightning's connector passes them
        name, version, experiment = "rows", 0, None

        def log_metrics(self, *, metrics, step=None):
            rows.append((step, {k: round(float(v), 5) for k, v in sorted(metrics.items())}))  # float64 sums here

        def log_hyperparams(self, *args, **kwargs):
            pass

    class Net(pl.LightningModule if framework == "lightning" else pl.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer, self.count = torch.nn.Linear(4, 1), 0.0

        def _next(self) -> float:
            self.count += 1
            return self.count

        def on_train_start(self):
            self.log("train_start", 123.0)

        def on_train_epoch_start(self):
            self.log("epoch_start", self._next())

        def on_validation_start(self):
            self.log("val_start", self._next())

        def on_validation_epoch_start(self):
            self.log("val_epoch_start", self._next())

        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def validation_step(self, batch, batch_idx):
            self.log("val", self.layer(batch).sum())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    loader = DataLoader(torch.randn(4, 4), batch_size=2)
    trainer = pl.Trainer(
        default_root_dir=root,
        max_epochs=2,
        num_sanity_val_steps=0,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=Keywords(),
    )
    model = Net()
    trainer.fit(model, loader, loader)
    metrics = {k: round(float(v), 5) for k, v in sorted(trainer.callback_metrics.items())}
    # as a list: the order of validate()'s dict is Lightning's too (one loader: the start hooks' names first)
    validated = [[(k, round(v, 5)) for k, v in r.items()] for r in trainer.validate(model, loader, verbose=False)]
    return {"rows": rows, "callback_metrics": metrics, "validated": validated}


def test_what_the_start_hooks_log_reaches_the_rows_and_results_as_in_lightning(tmp_path):
    lightning = _program("lightning", str(tmp_path / "l"))
    ours = _program("trainmesh", str(tmp_path / "t"))
    assert any("train_start" in row for _, row in lightning["rows"])
    assert [name for name, _ in lightning["validated"][0]] == ["val_start", "val_epoch_start", "val"]
    assert ours == lightning


def _evaluated(framework: str, root: str) -> list[Any]:
    """What ``trainer.test()`` returns: Lightning's logged metrics (``name_epoch`` for a value logged on
    step and epoch; none logged with ``logger=False``), per loader."""
    if framework == "lightning":
        import lightning.pytorch as pl

        base = pl.LightningModule
    else:
        import trainmesh as pl

        base = pl.Module

    class Net(base):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            loss = self.layer(batch).sum()
            self.log("both", loss, on_step=True, on_epoch=True)
            self.log("plain", loss)
            self.log("hidden", loss, logger=False)

    torch.manual_seed(0)
    loader = DataLoader(torch.randn(4, 4), batch_size=2)
    trainer = pl.Trainer(default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False)
    model = Net()
    return [sorted(r) for loaders in ([loader], [loader, loader]) for r in trainer.test(model, loaders, verbose=False)]


def test_what_test_returns_is_named_as_lightning_names_it(tmp_path):
    lightning = _evaluated("lightning", str(tmp_path / "l"))
    assert lightning[0] == ["both_epoch", "plain"]
    assert _evaluated("trainmesh", str(tmp_path / "t")) == lightning


def _seen_at_epoch_end(framework: str, root: str) -> list[Any]:
    """What the epoch-end hooks (a callback's, the module's) read in callback_metrics, logged_metrics and
    progress_bar_metrics, in their order, of values the same run's epoch-start hooks logged: in fit (its
    sanity check and two validations), validate over two loaders, and test."""
    if framework == "lightning":
        import lightning.pytorch as pl
    else:
        import trainmesh as pl
    seen: list[Any] = []

    def record(trainer: Any, hook: str) -> None:
        views = (trainer.callback_metrics, trainer.logged_metrics, trainer.progress_bar_metrics)
        seen.append((hook, [[(k, round(float(v), 5)) for k, v in view.items()] for view in views]))

    class Reader(pl.Callback):
        def on_validation_epoch_end(self, trainer, pl_module):
            record(trainer, "callback on_validation_epoch_end")

        def on_test_epoch_end(self, trainer, pl_module):
            record(trainer, "callback on_test_epoch_end")

    class Net(pl.LightningModule if framework == "lightning" else pl.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer, self.count = torch.nn.Linear(4, 1), 0.0

        def on_validation_epoch_start(self):
            self.count += 1
            self.log("val_opened", self.count, prog_bar=True)

        def on_test_epoch_start(self):
            self.log("test_opened", 7.0, on_epoch=True, on_step=False)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("val", self.layer(batch).sum())

        def test_step(self, batch, batch_idx):
            self.log("tested", self.layer(batch).sum())

        def on_validation_epoch_end(self):
            record(self.trainer, "module on_validation_epoch_end")

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    loader = DataLoader(torch.randn(4, 4), batch_size=2)
    trainer = pl.Trainer(
        default_root_dir=root,
        max_epochs=2,
        num_sanity_val_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        callbacks=[Reader()],
    )
    model = Net()
    trainer.fit(model, loader, loader)
    trainer.validate(model, [loader, loader], verbose=False)
    trainer.test(model, loader, verbose=False)
    return seen


def test_what_an_epoch_start_hook_logs_is_read_in_that_epochs_end_hooks_as_in_lightning(tmp_path):
    lightning = _seen_at_epoch_end("lightning", str(tmp_path / "l"))
    # Lightning's epoch-end view: the value of this validation (1, 2, 3: the sanity check's, then each epoch's)
    assert [dict(views[0])["val_opened"] for hook, views in lightning if hook.startswith("callback on_val")] == [
        1.0,
        2.0,
        3.0,
        4.0,
    ]
    assert dict(lightning[-1][1][0])["test_opened"] == 7.0
    assert _seen_at_epoch_end("trainmesh", str(tmp_path / "t")) == lightning


@pytest.mark.parametrize(
    ("hook", "levels"), [("on_train_epoch_start", {"on_step": True}), ("on_test_epoch_start", {"on_epoch": False})]
)
def test_an_epoch_start_hook_refuses_values_per_step_as_lightning_does(tmp_path, hook, levels):
    """Lightning's _FxValidator: an epoch-start hook logs on epoch only; on_step=True or on_epoch=False
    there raises before any batch (trainmesh logged it, a value per step nobody asked Lightning for)."""
    import lightning.pytorch as pl

    import trainmesh as tm

    words = []
    for base, trainer_class in ((pl.LightningModule, pl.Trainer), (tm.Module, tm.Trainer)):

        class Net(base):
            def __init__(self) -> None:
                super().__init__()
                self.layer = torch.nn.Linear(4, 1)

            def training_step(self, batch, batch_idx):
                return self.layer(batch).sum()

            def test_step(self, batch, batch_idx):
                self.log("tested", self.layer(batch).sum())

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        setattr(Net, hook, lambda self: self.log("opened", 1.0, **levels))
        trainer = trainer_class(
            default_root_dir=str(tmp_path),
            max_epochs=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
        )
        loader = DataLoader(torch.randn(4, 4), batch_size=2)
        run = trainer.fit if hook == "on_train_epoch_start" else trainer.test
        with pytest.raises(Exception, match=r"You can't `self.log\(on_") as raised:
            run(Net(), loader)
        words.append((type(raised.value).__name__, str(raised.value).split(".")[0]))
    assert words[1] == words[0]


def _same_name_at_start_and_step(framework: str, root: str, per_step: bool = False) -> list[Any]:
    """A name an epoch-start hook and the steps both log (one loader; validation's steps per step too
    where ``per_step``): what validate() and test() return, callback_metrics after them and the loggers' rows."""
    if framework == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch.loggers import Logger
    else:
        import trainmesh as pl
        from trainmesh.loggers import Logger
    seen: list[Any] = []

    class Rows(Logger):
        name, version, experiment = "rows", 0, None

        def log_metrics(self, metrics, step=None):
            seen.append(("row", step, sorted((k, round(float(v), 5)) for k, v in metrics.items())))

        def log_hyperparams(self, *args, **kwargs):
            pass

    class Net(pl.LightningModule if framework == "lightning" else pl.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def on_validation_epoch_start(self):
            self.log("val", 100.0)

        def on_test_epoch_start(self):
            self.log("val", 200.0, prog_bar=True)

        def validation_step(self, batch, batch_idx):
            self.log("val", self.layer(batch).sum(), on_step=per_step)

        def test_step(self, batch, batch_idx):
            self.log("val", self.layer(batch).sum(), prog_bar=True)

        def on_test_epoch_end(self):
            self.log("ended", 1.0)

    torch.manual_seed(0)
    loader = DataLoader(torch.randn(4, 4), batch_size=2)
    trainer = pl.Trainer(default_root_dir=root, logger=Rows(), enable_progress_bar=False, enable_model_summary=False)
    model = Net()
    for run in (trainer.validate, trainer.test):
        results = run(model, loader, verbose=False)
        seen.append(("results", [[(k, round(v, 5)) for k, v in r.items()] for r in results]))
        seen.append(sorted((k, round(float(v), 5)) for k, v in trainer.callback_metrics.items()))
        seen.append(sorted((k, round(float(v), 5)) for k, v in trainer.progress_bar_metrics.items()))
    return seen


@pytest.mark.parametrize("per_step", [False, True])
def test_a_name_logged_at_epoch_start_and_in_the_steps_reads_the_steps_value_as_in_lightning(tmp_path, per_step):
    """Lightning keeps both log calls of the name and its later one (the steps') is the epoch's value: in the
    results, callback_metrics, progress bar and the loggers' row; logged per step too, the start hook's value
    stays in the results and the row as 'val' (the steps' as 'val_epoch') and callback_metrics['val'] is the
    steps'. Before, trainmesh gave the start hook's (100.0), per step too in callback_metrics."""
    lightning = _same_name_at_start_and_step("lightning", str(tmp_path / "l"), per_step)
    at = next(i for i, item in enumerate(lightning) if item[0] == "results")
    assert (dict(lightning[at][1][0])["val"] == 100.0) == per_step
    assert dict(lightning[at + 1])["val"] != 100.0  # callback_metrics after validate()
    assert _same_name_at_start_and_step("trainmesh", str(tmp_path / "t"), per_step) == lightning
