"""A logger's ``after_save_checkpoint`` called after each checkpoint ModelCheckpoint writes, with a
proxy of the callback, as Lightning 2.6's (its own test loggers/test_logger.py::test_custom_logger;
was: never called, so a program's logger recording its checkpoints saw none); and
``DummyExperiment`` taking item assignment (::test_dummyexperiment_support_item_assignment)."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.models import quiet_trainer
from helpers.programs import linear_loss_module

pl = pytest.importorskip("lightning.pytorch")


def _calls(framework, root) -> list[tuple[str, str, int]]:
    calls: list[tuple[str, str, int]] = []

    class Recording(framework.loggers.Logger):
        name, version = "recording", 0

        def log_hyperparams(self, params, *args, **kwargs):
            pass

        def log_metrics(self, metrics, step=None):
            pass

        def after_save_checkpoint(self, checkpoint_callback):
            written = checkpoint_callback._last_checkpoint_saved  # the file just written, as Lightning's
            calls.append((type(checkpoint_callback).__name__, os.path.basename(written), len(calls)))  # a weakref proxy

    checkpoint = framework.callbacks.ModelCheckpoint(dirpath=str(root), monitor="loss", save_top_k=2, save_last=True)
    trainer = quiet_trainer(
        framework=framework, max_epochs=3, logger=Recording(), enable_checkpointing=True, callbacks=[checkpoint]
    )
    trainer.fit(linear_loss_module(framework, 3), DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4))
    return calls


def test_loggers_hear_of_each_checkpoint_as_under_lightning(tmp_path) -> None:
    import trainmesh

    expected = _calls(pl, tmp_path / "lightning")
    assert len(expected) == 6 and {name for name, _, _ in expected} == {"ProxyType"}
    assert _calls(trainmesh, tmp_path / "trainmesh") == expected


def test_dummy_experiment_takes_item_assignment_as_lightning_s() -> None:
    from trainmesh.loggers.logger import DummyExperiment

    for experiment in (pl.loggers.logger.DummyExperiment(), DummyExperiment()):
        experiment["variable"] = "value"
        assert experiment["variable"] != "value"
