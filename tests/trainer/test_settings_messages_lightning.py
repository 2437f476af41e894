"""Trainer arguments out of range refused in Lightning 2.6's words and type (``MisconfigurationException``),
where Lightning checks them itself: ``max_epochs``, ``max_steps``, ``check_val_every_n_epoch`` that is no
integer, ``gradient_clip_algorithm``. Before, trainmesh said "max_epochs=-100 must be an integer >= -1" and
the like (Lightning's own trainer/test_trainer.py matches its words)."""

import importlib
import warnings

import pytest

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}
CASES = [
    {"max_epochs": -100},
    {"max_steps": -2},
    {"check_val_every_n_epoch": 1.2},
    {"gradient_clip_algorithm": "Norm2"},
]


def _error(name, arguments):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            FRAMEWORKS[name].Trainer(accelerator="cpu", logger=False, **arguments)
        except Exception as error:  # noqa: BLE001 - the error is what is compared
            return type(error).__mro__, str(error)
    raise AssertionError(f"{name}: {arguments} accepted")


@pytest.mark.parametrize("arguments", CASES, ids=lambda a: next(iter(a)))
def test_loop_arguments_refused_in_lightning_s_words(arguments):
    lightning_types, lightning_words = _error("lightning", arguments)
    trainmesh_types, trainmesh_words = _error("trainmesh", arguments)
    assert "MisconfigurationException" in [t.__name__ for t in lightning_types]
    assert "MisconfigurationException" in [t.__name__ for t in trainmesh_types]
    assert trainmesh_words == lightning_words
