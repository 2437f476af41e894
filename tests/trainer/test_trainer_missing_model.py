"""``trainer.validate/test/predict()`` with no model given now or in an earlier run stops with Lightning 2.6's
``TypeError`` and words ("`Trainer.validate()` requires a `LightningModule` when it hasn't been passed in a
previous run"); still a ``ValueError`` too, as trainmesh raised before (then in its own words only; Lightning's
own trainer/test_trainer.py::test_exception_when_lightning_module_is_not_set_on_trainer)."""

import importlib
import warnings

import pytest

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}


def _errors(name):
    trainer = FRAMEWORKS[name].Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    seen = []
    for stage in ("validate", "test", "predict"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                getattr(trainer, stage)()
            except TypeError as error:
                seen.append((stage, str(error).split(":")[0]))
    return seen


def test_no_model_refused_as_lightning_refuses_it():
    lightning = _errors("lightning")
    assert [stage for stage, _ in lightning] == ["validate", "test", "predict"]
    assert _errors("trainmesh") == lightning
    with pytest.raises(ValueError):
        FRAMEWORKS["trainmesh"].Trainer(accelerator="cpu", logger=False).test()
