"""A loader that cannot be iterated stops with Lightning 2.6's ``TypeError`` naming where it came from
(its ``_check_dataloader_iterable``), before any batch, where trainmesh failed later with a bare
"'int' object is not iterable" (Lightning's own tests: test_dataloaders.py::test_non_iterables_raise).
A list of numbers (``[1]``, ``[0, 1]``) is one iterable of batches, not a list of loaders, as Lightning's
``CombinedLoader`` takes it (so ``test(dataloaders=[1])`` runs the step on the batch ``1``, in both)."""

import importlib
import itertools
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

pl = pytest.importorskip("lightning.pytorch")
FRAMEWORKS = {"lightning": pl, "trainmesh": importlib.import_module("trainmesh")}


def _loader():
    return DataLoader(TensorDataset(torch.randn(4, 2), torch.randn(4, 1)), batch_size=2)


def _model(framework, returned=None):
    class Net(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return F.mse_loss(self.layer(batch[0]), batch[1])

        validation_step = test_step = training_step

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    if returned is not None:
        Net.train_dataloader = lambda self: returned
    return Net()


CASES = {
    "fit(train_dataloaders=1)": lambda L, t: t.fit(_model(L), train_dataloaders=1),
    "fit(val_dataloaders=[loader, 1])": lambda L, t: t.fit(_model(L), _loader(), val_dataloaders=[_loader(), 1]),
    "validate(dataloaders=1)": lambda L, t: t.validate(_model(L), dataloaders=1),
    "train_dataloader() returns 1": lambda L, t: t.fit(_model(L, returned=1)),
}


@pytest.mark.parametrize("case", CASES)
def test_a_loader_that_cannot_be_iterated_stops_as_lightning(case, tmp_path):
    raised = {}
    for name, framework in FRAMEWORKS.items():
        trainer = framework.Trainer(
            max_epochs=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            default_root_dir=str(tmp_path / name),
        )
        with warnings.catch_warnings(), pytest.raises(Exception) as error:
            warnings.simplefilter("ignore")
            CASES[case](framework, trainer)
        raised[name] = (type(error.value).__name__, str(error.value))
    assert raised["trainmesh"] == raised["lightning"]


def _counting():
    return itertools.count()


# Iterables without a length (limit_*_batches=3 ends the endless ones) and containers of numbers,
# which Lightning's CombinedLoader takes as one iterable each, not as several loaders.
ITERABLES = {
    "predict(count())": lambda t, m: t.predict(m, _counting()),
    "predict([count(), count()])": lambda t, m: t.predict(m, [_counting(), _counting()]),
    "predict(islice(count(), 2))": lambda t, m: t.predict(m, itertools.islice(_counting(), 2)),
    "predict({'a': [0, 1], 'b': [2, 3]})": lambda t, m: t.predict(m, {"a": [0, 1], "b": [2, 3]}),
    "predict([[0, 1], [2, 3]])": lambda t, m: t.predict(m, [[0, 1], [2, 3]]),
    "validate([[0, 1], (x for x in [2])])": lambda t, m: t.validate(m, [[0, 1], (x for x in [2])], verbose=False),
    "test({'a': [0, 1], 'b': [2.0]})": lambda t, m: t.test(m, {"a": [0, 1], "b": [2.0]}, verbose=False),
    "test([0, 1, []]) (refused)": lambda t, m: t.test(m, [0, 1, []], verbose=False),
    "predict([0, 1])": lambda t, m: t.predict(m, [0, 1]),
    "predict((0.0, 1.0))": lambda t, m: t.predict(m, (0.0, 1.0)),
    "fit(train_dataloaders=[0.0, 1.0])": lambda t, m: t.fit(m, [0.0, 1.0]),
}


def _stepper(framework):
    class Steps(framework.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)
            self.seen = []

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return (batch, batch_idx, dataloader_idx)

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.seen.append((batch, batch_idx, dataloader_idx))
            self.log("batch", float(batch), batch_size=1)

        test_step = validation_step

        def training_step(self, batch, batch_idx):
            self.seen.append((batch, batch_idx))
            return self.layer(torch.ones(1)).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Steps()


@pytest.mark.parametrize("case", ITERABLES)
def test_iterables_and_containers_of_numbers_evaluate_as_lightning(case, tmp_path):
    """Lightning's test_prediction_loop.py::test_prediction_loop_with_iterable_dataset, with validate and
    test. Before: a list or dict of lists of numbers stopped with "An invalid dataloader was passed to
    `Trainer.predict(dataloaders=...)`. Found 0." (each number taken for a loader); fit over ``[0.0, 1.0]`` too."""
    found = {}
    for name, framework in FRAMEWORKS.items():
        trainer = framework.Trainer(
            limit_predict_batches=3, limit_val_batches=3, limit_test_batches=3, max_epochs=1, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            default_root_dir=str(tmp_path / name), accelerator="cpu", devices=1,
        )  # fmt: skip
        model = _stepper(framework)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found[name] = (ITERABLES[case](trainer, model), model.seen)
        except TypeError as error:
            found[name] = ("raised", str(error))
    assert found["trainmesh"] == found["lightning"]
