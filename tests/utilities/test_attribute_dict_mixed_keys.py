"""AttributeDict with keys of mixed types (``save_hyperparameters({1: 1, "2": 2})``, Lightning's own test
loggers/test_logger.py::test_log_hyperparams_key_collision): a missing attribute raises AttributeError and
``deepcopy`` works, as Lightning's (was: TypeError sorting the keys for the message, which broke deepcopy's
``__deepcopy__`` probe and with it a fit logging such hyperparameters)."""

from __future__ import annotations

import copy

import pytest

from trainmesh.utilities.attribute_dict import AttributeDict


def test_mixed_keys_behave_as_lightning_s() -> None:
    parsing = pytest.importorskip("lightning.pytorch.utilities.parsing")
    for hparams in (parsing.AttributeDict({1: 1, "a": 2}), AttributeDict({1: 1, "a": 2})):
        assert dict(copy.deepcopy(hparams)) == {1: 1, "a": 2}
        with pytest.raises(AttributeError):
            hparams.missing  # noqa: B018
