"""A step hook set to None on the instance (Lightning's own way of switching it off) or set to a
function there, run beside Lightning 2.6: the same warnings, the same refusals (as
MisconfigurationException, before anything runs) and the same trained weights."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")

import trainmesh as tm  # noqa: E402
from trainmesh.utilities.exceptions import MisconfigurationException as TmMisconfiguration  # noqa: E402

FRAMEWORKS = {
    "lightning": (pl, "lightning.pytorch.demos.boring_classes", "lightning.pytorch.utilities.exceptions"),
    "trainmesh": (tm, "trainmesh.demos.boring_classes", "trainmesh.utilities.exceptions"),
}


def _trainer(framework):
    return framework.Trainer(
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def _model(name, switch):
    torch.manual_seed(0)
    model = importlib.import_module(FRAMEWORKS[name][1]).BoringModel()
    calls = []
    if switch == "val_dataloader":
        model.val_dataloader = None
    elif switch == "validation_step":
        model.validation_step = None
    elif switch == "instance_step":

        def validation_step(batch, batch_idx):  # set on the instance: defines the hook
            calls.append(batch_idx)

        model.validation_step = validation_step
    return model, calls


def _fit(name, switch):
    model, calls = _model(name, switch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(FRAMEWORKS[name][0]).fit(model)
    skipping = [(type(w.message).__name__, str(w.message)) for w in caught if "Skipping val loop" in str(w.message)]
    return skipping, calls, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("switch", ["val_dataloader", "validation_step", "instance_step"])
def test_fit_with_a_switched_off_or_instance_hook_matches_lightning(switch):
    theirs, ours = _fit("lightning", switch), _fit("trainmesh", switch)
    assert ours[0] == theirs[0]  # the warning, its category and text
    assert ours[1] == theirs[1]  # an instance-level validation_step is called on the same batches
    for a, b in zip(theirs[2], ours[2], strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("stage", "switch"),
    [("validate", "validation_step"), ("test", "test_step"), ("predict", "predict_step"), ("predict", "forward")],
)
def test_evaluation_with_its_step_set_to_none_is_refused_as_lightning_refuses(stage, switch):
    refused = {}
    for name, (framework, _, exceptions) in FRAMEWORKS.items():
        model, _ = _model(name, None)
        setattr(model, switch, None)  # the test's own object, as Lightning's tests do
        misconfiguration = importlib.import_module(exceptions).MisconfigurationException
        with pytest.raises(misconfiguration) as error:
            getattr(_trainer(framework), stage)(model)
        refused[name] = type(error.value).__name__
    assert refused == {"lightning": "MisconfigurationException", "trainmesh": TmMisconfiguration.__name__}
