"""``trainer.predict_loop.return_predictions`` read and set as Lightning 2.6.6's ``_PredictionLoop``'s:
False until set, None decided by the strategy, True refused at set time where the workers are spawned
(no process started: the setter decides before any launch)."""

from __future__ import annotations

import pytest

import trainmesh

pl = pytest.importorskip("lightning.pytorch")


def _set_and_read(package, strategy: str, devices: int) -> list[object]:
    trainer = package.Trainer(strategy=strategy, devices=devices, accelerator="cpu", logger=False)
    read: list[object] = [trainer.predict_loop.return_predictions]  # before any predict
    for given in (False, None, True):
        try:
            trainer.predict_loop.return_predictions = given
            read.append(trainer.predict_loop.return_predictions)
        except Exception as error:  # MisconfigurationException: its message names the framework's class
            read.append(f"{type(error).__name__}: {str(error).split(' Found')[0]}")
    return read


@pytest.mark.parametrize(("strategy", "devices"), [("auto", 1), ("ddp", 2), ("ddp_spawn", 2)])
def test_return_predictions_setter_as_lightning(strategy, devices):
    """Before: True until set, None kept as None, and True accepted under ddp_spawn."""
    assert _set_and_read(trainmesh, strategy, devices) == _set_and_read(pl, strategy, devices)
