"""``TrainerPort.returns_predictions``: whether ``trainer.predict`` keeps and returns predictions,
decided as Lightning 2.6.6's ``_PredictionLoop.return_predictions`` setter decides it, on the same
Trainer arguments (no process started: the decision comes before the launch)."""

from __future__ import annotations

import pytest

import trainmesh

pl = pytest.importorskip("lightning.pytorch")


def _lightning(strategy: str, given: bool | None) -> bool | str:
    trainer = pl.Trainer(strategy=strategy, devices=2, accelerator="cpu", logger=False)
    try:
        trainer.predict_loop.return_predictions = given
    except Exception as error:  # MisconfigurationException: its message names Lightning's strategy class
        return f"{type(error).__name__}: {str(error).split(' Found')[0]}"
    return trainer.predict_loop.return_predictions


def _trainmesh(strategy: str, given: bool | None) -> bool | str:
    trainer = trainmesh.Trainer(strategy=strategy, devices=2, accelerator="cpu", logger=False)
    try:
        return trainer.runtime.trainer_port.returns_predictions(given)
    except Exception as error:
        return f"{type(error).__name__}: {str(error).split(' Found')[0]}"


@pytest.mark.parametrize("given", [None, True, False])
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn", "ddp_fork"])
def test_predictions_are_returned_where_lightning_returns_them(strategy, given):
    """ddp: returned by default (each rank its own); ddp_spawn/ddp_fork: none kept by default (the
    launching process gets None), and True refused with Lightning's error (trainmesh returned rank
    0's gathered predictions there)."""
    assert _trainmesh(strategy, given) == _lightning(strategy, given)
