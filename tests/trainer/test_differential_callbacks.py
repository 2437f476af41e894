"""``trainer.callbacks`` of a new Trainer under Lightning 2.6 and under trainmesh: the same classes
in the same order.

Lightning's ``_CallbackConnector`` appends to the given callbacks the default ``ModelCheckpoint``,
the ``max_time`` Timer, the default bar (``RichProgressBar`` where rich is installed, else
``TQDMProgressBar``) and the default summary (``RichModelSummary``, else ``ModelSummary``), none
where one of its kind is given, then moves the finders first and the checkpoints last. trainmesh
put its summary first, listed a ``ThroughputMonitor`` of its own before its ``ProgressBar`` (the
bar now owns that monitor), and kept a bar given with ``enable_progress_bar=False``.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning.pytorch")

CASES: dict[str, Any] = {
    "default": lambda C: {},
    "no_summary": lambda C: dict(enable_model_summary=False),
    "no_bar": lambda C: dict(enable_progress_bar=False),
    "no_checkpoint": lambda C: dict(enable_checkpointing=False),
    "nothing": lambda C: dict(enable_model_summary=False, enable_progress_bar=False, enable_checkpointing=False),
    "max_time": lambda C: dict(max_time="00:00:01:00"),
    "timer_and_max_time": lambda C: dict(max_time="00:00:01:00", callbacks=[C.Timer()]),
    "one_callback": lambda C: dict(callbacks=C.LearningRateMonitor()),
    "checkpoint_given": lambda C: dict(callbacks=[C.ModelCheckpoint(), C.EarlyStopping("x")]),
    "summary_given": lambda C: dict(callbacks=[C.ModelSummary(max_depth=2)]),
    "rich_summary_given": lambda C: dict(callbacks=[C.RichModelSummary()]),
    "summary_given_disabled": lambda C: dict(enable_model_summary=False, callbacks=[C.ModelSummary()]),
    "rich_bar_given": lambda C: dict(callbacks=[C.RichProgressBar()]),
    "tqdm_given": lambda C: dict(callbacks=[C.TQDMProgressBar()]),
    "bar_given_disabled": lambda C: dict(enable_progress_bar=False, callbacks=[C.TQDMProgressBar()]),
    "checkpoint_given_disabled": lambda C: dict(enable_checkpointing=False, callbacks=[C.ModelCheckpoint()]),
    "mixed": lambda C: dict(
        callbacks=[
            C.ModelCheckpoint(),
            C.LearningRateMonitor(),
            C.RichProgressBar(),
            C.ModelSummary(),
            C.EarlyStopping("x"),
            C.Timer(),
        ]
    ),
    "lr_finder": lambda C: dict(callbacks=[C.EarlyStopping("x"), C.LearningRateFinder()]),
    "batch_size_finder": lambda C: dict(callbacks=[C.ModelCheckpoint(), C.EarlyStopping("x"), C.BatchSizeFinder()]),
    "swa": lambda C: dict(
        callbacks=[C.StochasticWeightAveraging(swa_lrs=0.1), C.GradientAccumulationScheduler({0: 1})]
    ),
}


def callback_names(framework: str, case: str, root: Path) -> list[str] | str:
    """The class names in ``trainer.callbacks``, or the exception's class name where the Trainer refuses."""
    if framework == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch import callbacks

        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    else:
        import trainmesh as pl
        from trainmesh import callbacks
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = pl.Trainer(
                accelerator="cpu", devices=1, logger=False, default_root_dir=root, **CASES[case](callbacks)
            )
    except Exception as error:  # noqa: BLE001  the refusal is the outcome compared
        return type(error).__name__
    return [type(callback).__name__ for callback in trainer.callbacks]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_trainer_s_callbacks_are_lightning_s(case, tmp_path):
    assert callback_names("trainmesh", case, tmp_path) == callback_names("lightning", case, tmp_path)


def test_what_lightning_lists(tmp_path):
    """The owner's lists, as measured with rich installed (this venv)."""
    assert callback_names("lightning", "default", tmp_path) == [
        "RichProgressBar",
        "RichModelSummary",
        "ModelCheckpoint",
    ]
    assert callback_names("lightning", "lr_finder", tmp_path)[0] == "LearningRateFinder"
    assert callback_names("lightning", "bar_given_disabled", tmp_path) == "MisconfigurationException"


def callbacks_after_fit(framework: str, root: Path) -> list[str]:
    """``configure_callbacks`` returning a summary, an early stopping and a finder: Lightning's
    ``_attach_model_callbacks`` replaces the Trainer's of those classes and reorders the list."""
    import torch
    from torch.utils.data import DataLoader

    if framework == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch import callbacks
    else:
        import trainmesh as pl
        from trainmesh import callbacks

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def configure_callbacks(self):
            return [callbacks.ModelSummary(max_depth=2), callbacks.EarlyStopping("x"), callbacks.LearningRateFinder()]

    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        default_root_dir=root,
        enable_progress_bar=False,
        max_steps=1,
        callbacks=[callbacks.EarlyStopping("y"), callbacks.LearningRateMonitor()],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            trainer.fit(Model(), DataLoader(torch.ones(4, 1), batch_size=2))
        except Exception:  # noqa: BLE001, S110  the finder's search may refuse this tiny run: the list is set before
            pass
    return [type(callback).__name__ for callback in trainer.callbacks]


def test_the_model_s_callbacks_join_in_lightning_s_order(tmp_path):
    theirs = callbacks_after_fit("lightning", tmp_path / "lightning")
    assert callbacks_after_fit("trainmesh", tmp_path / "trainmesh") == theirs
