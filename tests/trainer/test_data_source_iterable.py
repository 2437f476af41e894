"""A loader that cannot be iterated stops with Lightning 2.6's ``TypeError`` naming where it came from
(its ``_check_dataloader_iterable``), before any batch, where trainmesh failed later with a bare
"'int' object is not iterable" (Lightning's own tests: test_dataloaders.py::test_non_iterables_raise).
(Given to ``test`` as ``[1]`` or ``{"a": 1}``, Lightning 2.6.6 fails inside the step or its fetcher, with
"'int' object is not subscriptable" or a step error; trainmesh stops with the error above.)"""

import importlib
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
