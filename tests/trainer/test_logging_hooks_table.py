"""Where ``self.log`` may be called and with which levels, hook by hook, against Lightning 2.6's own
table (its ``_FxValidator`` in ``logger_connector/fx_validator.py``): for every hook it names and every
``on_step`` / ``on_epoch`` given (None, True, False), trainmesh's log collector resolves the same levels,
or refuses with Lightning's exception type and words (trainmesh's hint may follow them)."""

from __future__ import annotations

import itertools

import pytest

from trainmesh.trainer.results import LogCollector
from trainmesh.utilities.exceptions import MisconfigurationException

fx_validator = pytest.importorskip("lightning.pytorch.trainer.connectors.logger_connector.fx_validator")
_FxValidator = fx_validator._FxValidator
LEVELS = (None, True, False)


def _lightning(fx: str, on_step: bool | None, on_epoch: bool | None) -> tuple[str, object]:
    try:
        return "levels", _FxValidator.check_logging_and_get_default_levels(fx, on_step=on_step, on_epoch=on_epoch)
    except Exception as error:  # noqa: BLE001 - the owner's outcome, compared as data
        return type(error).__name__, str(error)


def _ours(fx: str, on_step: bool | None, on_epoch: bool | None) -> tuple[str, object]:
    collector = LogCollector(lambda value, op: value)
    # the running stage's step hook (a prediction run's hooks refuse logging whatever the hook)
    stages = ("predict", "predict_step"), ("validation", "validation_step"), ("test", "test_step")
    collector.hook = next((step for word, step in stages if word in fx), "training_step")
    collector.fx = fx
    try:
        collector.log(
            "x", 1.0, prog_bar=False, logger=True, on_step=on_step, on_epoch=on_epoch, reduce_fx="mean",
            sync_dist=False, batch_size=1,
        )  # fmt: skip
    except MisconfigurationException as error:
        return type(error).__name__, str(error)
    entry = collector.results.entries["x"]
    return "levels", (entry.on_step, entry.on_epoch)


@pytest.mark.parametrize("fx", sorted(_FxValidator.functions))
def test_each_hook_logs_with_lightning_s_levels_or_refuses_with_its_words(fx):
    for on_step, on_epoch in itertools.product(LEVELS, LEVELS):
        kind, lightning = _lightning(fx, on_step, on_epoch)
        ours_kind, ours = _ours(fx, on_step, on_epoch)
        if kind == "levels" and lightning == (False, False):
            # allowed by the hook, refused by self.log itself ("... is not useful"), in Lightning as here
            assert ours_kind == "MisconfigurationException", (fx, on_step, on_epoch, ours)
            continue
        assert ours_kind == kind, (fx, on_step, on_epoch, ours)
        if kind == "levels":
            assert ours == lightning, (fx, on_step, on_epoch)
        elif "predict" not in fx:  # (a prediction run has no result collection: Lightning's other words)
            assert ours.startswith(lightning), (fx, on_step, on_epoch, ours)
