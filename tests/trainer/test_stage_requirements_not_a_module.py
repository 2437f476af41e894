"""A model that is no LightningModule and has no step for the stage (a bare ``nn.Linear``) stops each of
fit/validate/test/predict with Lightning 2.6's ``TypeError`` and words ("`model` must be a `LightningModule`
..., got `Linear`"), before anything runs. Before, trainmesh raised only a ``MisconfigurationException``
("Linear defines no training_step() ..."), which a program's ``except TypeError`` did not catch
(Lightning's own trainer/test_trainer.py::test_trainer_error_when_input_not_lightning_module)."""

import importlib
import warnings

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}
LIGHTNING_WORDS = "`model` must be a `LightningModule` or `torch._dynamo.OptimizedModule`, got `Linear`"


def _errors(name):
    framework = FRAMEWORKS[name]
    trainer = framework.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_checkpointing=False)
    seen = []
    for stage in ("fit", "validate", "test", "predict"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                getattr(trainer, stage)(torch.nn.Linear(2, 2))
            except TypeError as error:
                seen.append((stage, str(error)[: len(LIGHTNING_WORDS)]))
    return seen


def test_a_bare_torch_module_is_refused_as_lightning_refuses_it():
    lightning = _errors("lightning")
    assert lightning == [(stage, LIGHTNING_WORDS) for stage in ("fit", "validate", "test", "predict")]
    assert _errors("trainmesh") == lightning
