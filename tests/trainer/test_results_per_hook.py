"""One name logged from two hooks of a stage, and twice from one hook with other arguments, as
Lightning 2.6 keeps them (its ``_ResultCollection``: one metric per hook and name; a hook's second
call with other arguments raises ``MisconfigurationException``): the same program under Lightning
and trainmesh gives the same ``callback_metrics``, progress bar and logger rows, or the same error."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def _run(framework, case: str) -> tuple:
    class Rows(framework.loggers.Logger):
        name, version = "rows", 0

        def __init__(self) -> None:
            super().__init__()
            self.rows: list = []

        def log_hyperparams(self, *args, **kwargs) -> None: ...

        def log_metrics(self, metrics, step=None) -> None:
            self.rows.append((step, {k: round(float(v), 4) for k, v in sorted(metrics.items())}))

    class Model(framework.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            if case == "twice":
                self.log("foo", float(batch_idx))
                self.log("foo", float(batch_idx), prog_bar=True)
            else:
                self.log("foo", float(batch_idx + 1), on_epoch=case == "step_and_epoch", prog_bar=True)
            return self.layer(batch[0]).sum()

        def on_train_batch_end(self, *args) -> None:
            if case == "batch_end":
                self.log("foo", 50.0)

        def on_train_epoch_end(self) -> None:
            if case in ("epoch_end", "step_and_epoch"):
                self.log("foo", 111.0)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    rows = Rows()
    trainer = framework.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=rows,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    try:
        trainer.fit(Model(), DataLoader(TensorDataset(torch.ones(6, 1)), batch_size=2))
    except Exception as error:
        return type(error).__name__, str(error)
    shown = {k: round(float(v), 4) for k, v in trainer.callback_metrics.items()}
    return shown, dict(trainer.progress_bar_metrics), rows.rows


@pytest.mark.parametrize("case", ["twice", "epoch_end", "batch_end", "step_and_epoch"])
def test_a_name_logged_by_two_hooks_is_two_metrics_as_in_lightning(case: str) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _run(lightning, case)
    assert _run(trainmesh, case) == expected
    if case == "twice":
        assert expected[0] == "MisconfigurationException"


def _bar_after_fit(framework, tmp_path) -> tuple[dict, dict]:
    from importlib import import_module

    boring = import_module(f"{framework.__name__}.demos.boring_classes").BoringModel

    class Model(boring):  # Lightning's test_on_train_epoch_end_metrics_collection (tests/models/test_hooks.py)
        def training_step(self, *args, **kwargs):
            output = super().training_step(*args, **kwargs)
            self.log_dict({"step_metric": torch.tensor(-1), "shared_metric": 100}, logger=False, prog_bar=True)
            return output

        def on_train_epoch_end(self) -> None:
            epoch = self.current_epoch
            self.log_dict(
                {f"epoch_metric_{epoch}": torch.tensor(epoch), "shared_metric": 111}, logger=False, prog_bar=True
            )

    model = Model()
    trainer = framework.Trainer(
        max_epochs=3, default_root_dir=tmp_path, overfit_batches=2, accelerator="cpu", enable_model_summary=False
    )
    trainer.fit(model)
    bar = trainer.progress_bar_callback.get_metrics(trainer, model)
    bar.pop("v_num", None)
    return bar, {k: float(v) for k, v in trainer.callback_metrics.items()}


def test_the_epoch_end_value_replaces_the_step_s_in_the_bar_as_in_lightning(tmp_path) -> None:
    lightning = pytest.importorskip("lightning.pytorch")
    import trainmesh

    expected = _bar_after_fit(lightning, tmp_path / "lightning")
    assert expected[0]["shared_metric"] == 111
    assert _bar_after_fit(trainmesh, tmp_path / "trainmesh") == expected
